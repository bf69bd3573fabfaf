"""Shared timing for the benchmarks: best of R runs after a warm-up, tiny synchronized inside.

A benchmark run with --cpu-time runs every contender on one thread (torch.set_num_threads(1),
TINY_THREADS=1) and times the CPU time of that thread (time.thread_time) instead of the wall clock: on a
shared, loaded machine the wall clock also counts the time other processes held the core, which moves
figures by 2-4x; one thread's CPU time does not, so it compares the kernels themselves (recording and
the sync included).
"""

import os
import sys
import time

# torch's OpenMP workers (libgomp) spin on a core for 6-10 ms of CPU after each parallel region by default, and a
# contender timed right after an eager op ran on one core fewer (tiny's bfloat16 conv2d: median 3.0 ms alone, 4.6-5.7
# interleaved with eager; OMP_WAIT_POLICY=passive or a bounded spin: 3.0-3.3). GOMP_SPINCOUNT=30000 bounds it to
# ~0.1 ms of CPU, about what tiny's idle workers spin (TINY_SPIN_US, 200 us: ~0.25 ms); back-to-back eager ops still
# find their workers awake. libgomp reads it when torch loads, so the benchmark starts again with it set; setting
# GOMP_SPINCOUNT yourself (300000 is libgomp's default) keeps yours.
if "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "30000"
    os.execv(sys.executable, [sys.executable, *sys.argv])

CPU_TIME = "--cpu-time" in sys.argv
if CPU_TIME:
    os.environ["TINY_THREADS"] = "1"  # read when tiny's thread pool starts

import torch  # noqa: E402

import torch_tiny  # noqa: E402, F401  (registers the tiny device)


def best_time(fn, reps=5):
    fn()  # warm-up: compiles, allocates, fills caches
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        torch.tiny.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def row(name, tiny_s, torch_s, extra=""):
    times = f"tiny {tiny_s * 1e3:9.3f} ms   torch {torch_s * 1e3:9.3f} ms"
    print(f"{name:<34} {times}   ratio {torch_s / tiny_s:5.2f}x {extra}")


if CPU_TIME:
    torch.set_num_threads(1)
CLOCK = time.thread_time if CPU_TIME else time.perf_counter


def contenders(fn, cpu_args, tiny_args, compiled):
    """tiny and eager (and Inductor when `compiled`) running fn on the same inputs."""
    c = {"tiny": lambda: fn(*tiny_args), "eager": lambda: fn(*cpu_args)}
    if compiled:
        f = torch.compile(fn)
        c["torch.compile"] = lambda: f(*cpu_args)
    return c


def run_once(fn, clock=time.perf_counter):
    """Seconds by `clock` of one call of fn, tiny work synchronized inside."""
    start = clock()
    result = fn()  # held until the sync: a lazy result dropped first would never be computed
    torch.tiny.synchronize()
    elapsed = clock() - start
    del result
    return elapsed


WARM = 5e-3  # seconds of untimed calls before each timed one (see interleaved)


def interleaved(contenders, rounds=12, clock=time.perf_counter):
    """Times each contender (name -> fn) once per round, in turn, so that the shared machine's changing
    speed reaches all of them alike; every fn is called once first (compiles, allocates, warms caches).
    Returns name -> list of seconds by `clock` (time.thread_time: the calling thread's CPU time).

    In every round each contender runs untimed right before its timed call, once and for at least WARM seconds, so
    that the timed call finds the machine as that contender leaves it (its own threads awake, its operands in
    cache), as a program that runs it over and over does, not as the contender before it left it: right after an
    eager op, eager's OpenMP worker still spins on the second core (GOMP_SPINCOUNT above), and tiny's worker joined a
    32-row x @ w kernel 190 us late on average (27 us after a sleep instead), leaving it one thread: 0.50 ms against
    0.25 run back to back. One untimed call was too short a wait for an op of 0.1 ms: a bfloat16 x @ w of 32 rows by
    1024 x 1024 took tiny 0.126-0.130 ms after one, 0.061-0.065 after four or alone (eager 0.092-0.095 either way).
    A millisecond was too short a wait after Inductor's 2.4 ms tan of 4M floats, whose OpenMP workers kept spinning:
    tiny's tan took 1.32 / 1.50 ms (best / median) after it, 1.20 / 1.26 after 5 ms of its own calls, 1.18 / 1.20
    after 20."""
    for fn in contenders.values():
        run_once(fn)
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            start = time.perf_counter()
            run_once(fn)
            while time.perf_counter() - start < WARM:
                run_once(fn)
            times[name].append(run_once(fn, clock))
    return times


def report(title, times, base="tiny"):
    """One line per contender: best and median, and its best and median over `base`'s (above 1: base
    is faster)."""
    import statistics

    b_best, b_med = min(times[base]), statistics.median(times[base])
    print(title)
    for name, ts in times.items():
        best, med = min(ts), statistics.median(ts)
        ratio = "" if name == base else f"   {base} is {best / b_best:5.2f}x (best) {med / b_med:5.2f}x (median) faster"
        print(f"  {name:<18} best {best * 1e3:9.3f} ms   median {med * 1e3:9.3f} ms{ratio}")
