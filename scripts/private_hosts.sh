#!/bin/bash
# usage: private_hosts.sh up|down   -- needs root, and the ssh hosts of ../shared/infra/ssh_hosts.sh up
#
# Share-nothing test hosts p1..pN: in each network namespace lp-hN (made by ssh_hosts.sh), a
# SECOND sshd on port $LP_PRIVATE_PORT (2200) in its own mount and UTS namespaces. Inside, /tmp,
# /var/tmp, /home, /root, /run/user and /dev/shm are fresh tmpfs, the tree holding the launcher's
# checkout and venvs (/work, and this checkout's parent) is hidden, and /opt/lp is the host's own:
#   /opt/lp/env     a venv of /usr/bin/python3 with launchpad_py[$LP_PRIVATE_EXTRAS] (default
#                   examples: the paper's examples run there), installed from wheels built
#                   here once (pip wheel of this checkout and its dependencies)
#   /opt/lp/bare    a venv without launchpad_py (for the "not installed" errors)
#   /opt/lp/wheels  the wheelhouse (and lp_probe_pkg, a tiny package installed nowhere, for
#                   the missing-package and provisioning tests; pip --no-index --find-links)
# ssh aliases p1..pN are in $D/ssh_config. So a node that leans on a path of the launcher's
# (its run directory, a socket, the secret's file, the user's modules, the interpreter) fails.
# Idempotent: `up` again rebuilds a host's /opt/lp only when this checkout's wheel changed.
set -euo pipefail
D=${LP_PRIVATE_DIR:-/tmp/lp-private}; SSH_D=${LP_SSH_DIR:-/tmp/lp-ssh}
PORT=${LP_PRIVATE_PORT:-2200}; N=${LP_SSH_HOSTS:-3}; NET=10.250.0
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${LP_PRIVATE_PYTHON:-/usr/bin/python3}; EXTRAS=${LP_PRIVATE_EXTRAS-examples}
cmd=${1:-up}

stop_host() {  # $1 = host index
  local pid_file=$D/p$1/opt/sshd/sshd.pid
  if [ -f "$pid_file" ]; then kill "$(cat "$pid_file")" 2>/dev/null || true; rm -f "$pid_file"; fi
}

if [ "$cmd" = down ]; then
  for i in $(seq 1 "$N"); do stop_host "$i"; done
  exit 0
fi
[ "$cmd" = up ] || { echo "usage: $0 up|down" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "private_hosts.sh: needs root" >&2; exit 1; }
for i in $(seq 1 "$N"); do
  ip netns list | grep -q "^lp-h$i\b" || { echo "private_hosts.sh: no namespace lp-h$i; run ssh_hosts.sh up first" >&2; exit 1; }
done
mkdir -p "$D/wheels"; chmod 700 "$D"

# The wheelhouse, once per checkout content: launchpad_py from this checkout, its dependencies.
stamp=$(cd "$REPO" && { echo "$EXTRAS"; git ls-files -co --exclude-standard -- launchpad_py pyproject.toml | sort | xargs sha256sum; } | sha256sum | cut -c1-16)
if [ "$(cat "$D/wheels/.stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -f "$D"/wheels/launchpad_py-*.whl
  "$PY" -m pip wheel -q --disable-pip-version-check -w "$D/wheels" "$REPO${EXTRAS:+[$EXTRAS]}" 2>&1 | grep -v '^WARNING: Location' || true
  "$PY" - "$D/wheels" <<'EOP'
import base64, hashlib, sys, zipfile
files = {'lp_probe_pkg/__init__.py': b'VALUE = 42\n',
         'lp_probe_pkg-1.0.dist-info/METADATA': b'Metadata-Version: 2.1\nName: lp_probe_pkg\nVersion: 1.0\n',
         'lp_probe_pkg-1.0.dist-info/WHEEL': b'Wheel-Version: 1.0\nGenerator: private_hosts.sh\nRoot-Is-Purelib: true\nTag: py3-none-any\n'}
def digest(data):
    return 'sha256=' + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
record = ''.join(f'{name},{digest(data)},{len(data)}\n' for name, data in files.items())
record += 'lp_probe_pkg-1.0.dist-info/RECORD,,\n'
with zipfile.ZipFile(f'{sys.argv[1]}/lp_probe_pkg-1.0-py3-none-any.whl', 'w') as wheel:
    for name, data in files.items():
        wheel.writestr(name, data)
    wheel.writestr('lp_probe_pkg-1.0.dist-info/RECORD', record)
EOP
  echo "$stamp" > "$D/wheels/.stamp"
fi

# What every host's sshd runs inside its namespaces before it starts (ns, index, checkout dir).
hide_and_serve() {
  cat <<EOS
set -e
mount --make-rprivate /
hostname lp-p$1
mount --bind "$D/p$1/opt" /opt/lp
for dir in /tmp /var/tmp /home /root /run/user /dev/shm; do
  if [ -d \$dir ]; then mount -t tmpfs -o mode=1777 lp-private \$dir; fi
done
chmod 700 /root
for dir in /work "$(dirname "$REPO")" "$D"; do
  if [ -d \$dir ]; then mount -t tmpfs -o mode=755 lp-hidden \$dir; fi
done
exec /usr/sbin/sshd -f /opt/lp/sshd/sshd_config -E /opt/lp/sshd/sshd.log
EOS
}

mkdir -p /opt/lp   # The mount point of each host's own /opt/lp (empty out here).
for i in $(seq 1 "$N"); do
  H=$D/p$i/opt
  if [ -f "$H/sshd/sshd.pid" ] && kill -0 "$(cat "$H/sshd/sshd.pid")" 2>/dev/null \
      && [ "$(cat "$H/.stamp" 2>/dev/null)" = "$stamp" ]; then
    continue  # Up, with this checkout's launchpad_py.
  fi
  stop_host "$i"
  rm -rf "$H"; mkdir -p "$H/sshd" "$H/wheels"
  cp -l "$D"/wheels/*.whl "$H/wheels/" 2>/dev/null || cp "$D"/wheels/*.whl "$H/wheels/"
  cp "$SSH_D/hostkey" "$SSH_D/authorized_keys" "$H/sshd/"
  chmod 600 "$H/sshd/hostkey" "$H/sshd/authorized_keys"
  cat > "$H/sshd/sshd_config" <<EOC
Port $PORT
ListenAddress 0.0.0.0
HostKey /opt/lp/sshd/hostkey
PidFile /opt/lp/sshd/sshd.pid
AuthorizedKeysFile /opt/lp/sshd/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
AcceptEnv LP_*
MaxStartups 100:30:200
MaxSessions 100
EOC
  # The venvs are made at their final path (/opt/lp/...) inside a mount namespace of their own.
  unshare --mount --propagation private sh -c "mount --bind '$H' /opt/lp &&
    '$PY' -m venv /opt/lp/env && '$PY' -m venv /opt/lp/bare &&
    /opt/lp/env/bin/python -m pip install -q --disable-pip-version-check --no-index \
      --find-links /opt/lp/wheels 'launchpad_py${EXTRAS:+[$EXTRAS]}'" 2>&1 | grep -v '^WARNING: Location' || true
  nsenter --net=/run/netns/lp-h$i unshare --mount --uts --propagation private \
    bash -c "$(hide_and_serve "$i")"
  echo "$stamp" > "$H/.stamp"
done

{
  printf 'Host p*\n  User root\n  Port %s\n  IdentityFile %s/id_ed25519\n  IdentitiesOnly yes\n' "$PORT" "$SSH_D"
  printf '  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n  ConnectTimeout 5\n'
  for i in $(seq 1 "$N"); do printf 'Host p%s\n  HostName %s\n' "$i" "$NET.$((10+i))"; done
} > "$D/ssh_config"
for i in $(seq 1 "$N"); do  # Up once each answers with launchpad_py importable.
  for _ in $(seq 1 50); do
    ssh -F "$D/ssh_config" "p$i" /opt/lp/env/bin/python -c "'import launchpad_py'" 2>/dev/null && break
    sleep 0.2
  done
done
echo "private hosts p1..p$N up (ssh -F $D/ssh_config p1)"
