"""bench.cpu: the CPU a server process spends is counted, also in threads that end."""

import subprocess
import sys

from bench.cpu import CpuMeter

_CHILD = r'''
import sys, threading, time
def burn():
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
print("ready", flush=True)
sys.stdin.readline()
t = threading.Thread(target=burn)
t.start()
t.join()
print("done", flush=True)
sys.stdin.readline()
'''


def test_cpu_of_a_thread_that_ended_inside_the_window_is_counted():
    """A server thread that burns 0.3 s of CPU and ends still shows in the difference."""
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        meter = CpuMeter([child.pid], include_self=False)
        before = meter.snapshot()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "done\n"
        cpu_us, _ = meter.per_call(before, meter.snapshot(), 1)
        assert 0.25e6 <= cpu_us < 2e6
    finally:
        child.stdin.close()
        child.wait(10)


_SWITCHER = r'''
import sys, threading, time
def switch():
    for _ in range(300):  # Each sleep blocks: a voluntary context switch of this thread.
        time.sleep(0.0002)
    print("ready", flush=True)
    sys.stdin.readline()
t = threading.Thread(target=switch)
t.start()
t.join()
print("done", flush=True)
sys.stdin.readline()
'''


def test_switches_of_a_thread_that_ended_inside_the_window_are_not_subtracted():
    """A server thread with hundreds of switches before the window that ends inside it
    leaves the window's switch count at zero or more, never negative."""
    child = subprocess.Popen([sys.executable, "-c", _SWITCHER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        meter = CpuMeter([child.pid], include_self=False)
        before = meter.snapshot()
        child.stdin.write("end\n")  # The thread reads this and ends.
        child.stdin.flush()
        assert child.stdout.readline() == "done\n"
        _, switches = meter.per_call(before, meter.snapshot(), 1)
        assert 0 <= switches < 100
    finally:
        child.stdin.close()
        child.wait(10)
