"""Launchers: run a program's executables somewhere, supervise them, stop them."""

from launchpad_py.launchers.controller import ProgramController
from launchpad_py.launchers.launch import launch
from launchpad_py.launchers.registry import LaunchType
from launchpad_py.launchers.registry import is_local_launch
from launchpad_py.launchers.registry import is_local_launch_or_test
from launchpad_py.launchers.registry import register
from launchpad_py.launchers.kubernetes_resources import KubernetesResources
from launchpad_py.launchers.resources import PythonProcess
from launchpad_py.launchers.slurm_resources import SlurmResources
from launchpad_py.launchers.ssh_host import SshHost
from launchpad_py.launchers.worker_api import NodeState
from launchpad_py.launchers.worker_api import NodeStatus
