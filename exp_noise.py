import os, sys, time, statistics
sys.path.insert(0, "/tmp/nbrmm-site")
import nbrmm, nbrmm.mr
from nbrmm._nbrmm import _testing as T
cuda = nbrmm.mr.CudaMemoryResource()
arena = nbrmm.mr.ArenaMemoryResource(cuda, arena_size=1 << 30)
B = nbrmm.Buffer
def batch(n=20):
    t = time.perf_counter_ns()
    for _ in range(n): B(256, mr=arena)
    return (time.perf_counter_ns() - t) / n
def series(seconds):
    out = []; end = time.perf_counter() + seconds
    while time.perf_counter() < end: out.append(batch())
    return out
def q(v):
    v = sorted(v); n = len(v)
    return f"min {v[0]:6.0f} q1 {v[n//4]:6.0f} med {v[n//2]:6.0f} q3 {v[3*n//4]:6.0f} n {n}"
print("cpus", os.sched_getaffinity(0), "nproc", os.cpu_count())
for _ in range(3):
    s = series(0.5); print("unpinned ", q(s), "floor", round(T.allocate_round_trip_ns(arena, 256, 100000)), "gil", round(T.gil_round_trip_ns(100000)))
allc = sorted(os.sched_getaffinity(0))
for c in allc:
    os.sched_setaffinity(0, {c})
    s = series(0.3)
    print(f"cpu {c:2d}   ", q(s), "floor", round(T.allocate_round_trip_ns(arena, 256, 100000)), "gil", round(T.gil_round_trip_ns(100000)))
os.sched_setaffinity(0, set(allc))
for _ in range(2):
    s = series(0.5); print("unpinned ", q(s))
# sequence pattern, unpinned: 2 s, 20 ms windows
seq = []
end = time.perf_counter() + 2
while time.perf_counter() < end:
    w = series(0.02); seq.append((round(statistics.median(w)), os.sched_getcpu() if hasattr(os, "sched_getcpu") else -1))
print("20ms windows median (cpu):", seq[:100])
