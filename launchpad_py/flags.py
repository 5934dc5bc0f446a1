"""Command-line flags read by launchers; defined as soon as the package is imported.

A script that never lets absl parse its command line (no ``app.run``) still
gets its ``--lp_*`` flags: the first read parses them from ``sys.argv``
(``--lp_x=v``, ``--lp_x v``, ``--lp_bool``, ``--nolp_bool``) and warns about
``--lp_*`` names that are no flag of ours. Other flags stay unparsed.
"""

import re
import sys
import warnings

from absl import flags

from launchpad_py import errors

LAUNCH_TYPE = flags.DEFINE_string(
    'lp_launch_type', 'local_mt',
    'How to launch a program when lp.launch() is not told: local_mt, local_mp, test_mt, test_mp, '
    'ssh, slurm, kubernetes.')
TERMINATION_NOTICE_SECS = flags.DEFINE_integer(
    'lp_termination_notice_secs', 10,
    'Seconds a node has to exit after a stop request before its process is killed.')
SSH_HOSTS = flags.DEFINE_list(
    'lp_ssh_hosts', [],
    'For --lp_launch_type=ssh: hosts (names or ssh aliases) that the nodes of groups without '
    'resources are spread over, round-robin.')
SSH_OPTIONS = flags.DEFINE_string(
    'lp_ssh_options', '',
    "For --lp_launch_type=ssh: extra ssh arguments for the hosts of --lp_ssh_hosts, e.g. "
    "'-F cluster_ssh_config'.")
SSH_PYTHON = flags.DEFINE_string(
    'lp_ssh_python', None,
    'For --lp_launch_type=ssh: the interpreter on the hosts of --lp_ssh_hosts (default: the '
    'launcher\'s own path, for hosts sharing its filesystem).')
SSH_SHIP_CODE = flags.DEFINE_boolean(
    'lp_ssh_ship_code', False,
    'For --lp_launch_type=ssh: pack the working directory and the import-path entries of your '
    'own, send it once per host and run nodes from it, for every SshHost that does not set '
    'ship_code (for hosts that do not share the launcher\'s filesystem).')
K8S_MANIFESTS_DIR = flags.DEFINE_string(
    'lp_k8s_manifests_dir', None,
    'For --lp_launch_type=kubernetes: a dry run. Write every manifest the launch would apply as '
    'YAML files into this directory and apply nothing.')
K8S_IMAGE = flags.DEFINE_string(
    'lp_k8s_image', None,
    'For --lp_launch_type=kubernetes: the image of every group that resources leave out '
    '(it must hold your code and launchpad_py).')
DASHBOARD = flags.DEFINE_bool(
    'lp_dashboard', False,
    'Serve a web dashboard of the launched program on a loopback port (its address and token are '
    'printed when it starts); see docs/observability.md.')
DASHBOARD_PORT = flags.DEFINE_integer(
    'lp_dashboard_port', 0, 'Port of the dashboard (--lp_dashboard); 0 picks a free one.')
SLURM_PARTITION = flags.DEFINE_string(
    'lp_slurm_partition', '',
    'For --lp_launch_type=slurm: the partition of groups whose resources name none '
    "(default: the cluster's default partition).")
SLURM_TIME = flags.DEFINE_string(
    'lp_slurm_time', '', "For --lp_launch_type=slurm: the job's time limit, as salloc --time "
    "(e.g. '02:00:00'; default: the partition's).")
SLURM_ACCOUNT = flags.DEFINE_string(
    'lp_slurm_account', '', 'For --lp_launch_type=slurm: the account the job is charged to.')
SLURM_ARGS = flags.DEFINE_string(
    'lp_slurm_args', '', "For --lp_launch_type=slurm: extra salloc arguments for every component "
    "of the job, e.g. '--qos=high --constraint=v100'.")
SLURM_OUTPUT_DIR = flags.DEFINE_string(
    'lp_slurm_output_dir', 'lp-slurm-logs',
    'For --lp_launch_type=slurm: node logs go to DIR/<program>-<job id>/<label>_<index>.log.')
SLURM_LAUNCHER_ADDRESS = flags.DEFINE_string(
    'lp_slurm_launcher_address', '',
    "For --lp_launch_type=slurm: this machine's address as the compute nodes reach it (default: "
    'the address of the interface on the route to the first allocated node).')
SLURM_PENDING_TIMEOUT = flags.DEFINE_float(
    'lp_slurm_pending_timeout', 0,
    'For --lp_launch_type=slurm: give up (and cancel the job) after it has been pending this many '
    'seconds; 0 waits as long as the scheduler takes, reporting why every 30 s.')


def value_or_default(holder: flags.FlagHolder):
    """The flag's value; before absl parses flags, as ``sys.argv`` sets it, or its default."""
    try:
        return holder.value
    except flags.UnparsedFlagAccessError:
        parse_own_flags(sys.argv[1:])
        return flags.FLAGS[holder.name].value


_parsed_argv: list[str] | None = None
_OWN = re.compile(r'--(no)?(lp_\w+)(?:=(.*))?$', re.DOTALL)


def parse_own_flags(argv: list[str]) -> None:
    """Sets our flags from the ``--lp_*`` arguments of ``argv`` (once per distinct ``argv``)."""
    global _parsed_argv
    if argv == _parsed_argv:
        return
    _parsed_argv = list(argv)
    unknown = []
    args = iter(argv)
    for arg in args:
        if arg == '--':
            break
        match = _OWN.match(arg)
        if match is None:
            continue
        negated, name, value = match.groups()
        if name not in flags.FLAGS:
            unknown.append(arg)
            continue
        flag = flags.FLAGS[name]
        if flag.boolean and value is None:
            value = 'false' if negated else 'true'
        elif value is None:
            value = next(args, None)
        if value is None or (negated and not flag.boolean):
            raise errors.ProgramError(f'flag --{name} needs a value, as in --{name}=...')
        try:
            flag.parse(value)
        except flags.IllegalFlagValueError as exc:
            raise errors.ProgramError(f'bad value {value!r} for flag --{name}: {exc}') from None
    if unknown:
        warnings.warn(f'launchpad_py ignored {", ".join(unknown)}: no such flag (see '
                      f'--helpfull of a script that calls absl.app.run)', stacklevel=3)
