"""bench.cpu: the CPU a server process spends is counted, also in threads that end."""

import subprocess
import sys

from bench.cpu import CpuMeter

# A server stand-in: its thread works inside the window ("burn": 0.3 s of CPU after "go"),
# or before it ("switch": 300 blocking sleeps before "ready"), and ends inside it.
_CHILD = r'''
import sys, threading, time
def work():
    for _ in range(300 if sys.argv[1] == "switch" else 0):  # Each sleep: a switch.
        time.sleep(0.0002)
    print("ready", flush=True)
    sys.stdin.readline()
    end = time.process_time() + (0.3 if sys.argv[1] == "burn" else 0)
    while time.process_time() < end:
        pass
t = threading.Thread(target=work)
t.start()
t.join()
print("done", flush=True)
sys.stdin.readline()
'''


def _window(work: str):
    """(CPU µs, context switches) of a child process between its "ready" and its "done",
    the window it is told to "go" in."""
    child = subprocess.Popen([sys.executable, "-c", _CHILD, work], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        meter = CpuMeter([child.pid], include_self=False)
        before = meter.snapshot()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "done\n"
        return meter.per_call(before, meter.snapshot(), 1)
    finally:
        child.stdin.close()
        child.wait(10)


def test_cpu_of_a_thread_that_ended_inside_the_window_is_counted():
    """A server thread that burns 0.3 s of CPU and ends still shows in the difference."""
    cpu_us, _ = _window("burn")
    assert 0.25e6 <= cpu_us < 2e6


def test_switches_of_a_thread_that_ended_inside_the_window_are_not_subtracted():
    """A server thread with hundreds of switches before the window that ends inside it
    leaves the window's switch count at zero or more, never negative."""
    _, switches = _window("switch")
    assert 0 <= switches < 100
