"""Launchers: run a program's executables somewhere, supervise them, stop them.

``launch`` (``lp.launch``), ``registry`` (every backend: name, resources and options
types, capabilities; plugins through the ``launchpad_py.launchers`` entry points),
``options`` (the launch's options as one value), ``signals`` (Ctrl-C), ``gc_pause`` (no
full garbage collection while a launch is under way) and
``start_program`` (the launch sequence local processes and the remote core share). One folder per
backend: ``local/``, ``remote/`` (shared by the multi-host ones), ``ssh/``, ``slurm/``,
``kubernetes/``, ``ray/``.

May import everything below (``supervision``, ``observability``, ``nodes``, ``node_side``,
``program``, ``courier``); a backend never imports another backend.
"""

from launchpad_py.supervision.controller import ProgramController
from launchpad_py.launchers.launch import launch
from launchpad_py.launchers.registry import LaunchType
from launchpad_py.launchers.registry import is_local_launch
from launchpad_py.launchers.registry import is_local_launch_or_test
from launchpad_py.launchers.registry import register
from launchpad_py.launchers.kubernetes.resources import KubernetesResources
from launchpad_py.launchers.local.resources import PythonProcess
from launchpad_py.launchers.ray.resources import RayResources
from launchpad_py.launchers.slurm.resources import SlurmResources
from launchpad_py.launchers.ssh.host import SshHost
from launchpad_py.supervision.worker import NodeState
from launchpad_py.supervision.worker import NodeStatus
