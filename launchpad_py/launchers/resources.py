"""Per-group resources for launchers that run local processes.

    lp.launch(p, launch_type='local_mp',
              local_resources={'learner': lp.PythonProcess(env={'XLA_FLAGS': '...'})})
"""

from __future__ import annotations

import dataclasses
import sys


@dataclasses.dataclass
class PythonProcess:
    """How to start the processes of one group.

    ``args``: extra command-line flags for the node processes (parsed with
    absl, after the launching script's own flags, so they override them).
    ``env``: variables added to the node processes' environment.
    ``interpreter``: the Python executable (default: the launcher's own).
    """

    args: list[str] | tuple[str, ...] = ()
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    interpreter: str = sys.executable

    def __post_init__(self) -> None:
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise TypeError(f'PythonProcess args must be a list of strings (got {self.args!r})')
        bad = {k: v for k, v in self.env.items() if not isinstance(k, str) or not isinstance(v, str)}
        if bad:
            raise TypeError(f'PythonProcess env keys and values must be strings (got {bad!r})')
