"""Where the nanoseconds of ``Buffer(256, mr=arena)`` go: timeit medians of its parts,
side by side in one process. Run on a GPU machine: ``python benchmarks/breakdown.py``."""

import statistics
import sys
import timeit

import nbrmm
import nbrmm.mr
from nbrmm._nbrmm import _testing


def median_ns(stmt, env, number=20000, repeat=15):
    runs = timeit.repeat(stmt, globals=env, number=number, repeat=repeat)
    return statistics.median(runs) / number * 1e9


def main():
    if nbrmm.get_device_count() == 0:
        print("breakdown: no GPU, nothing measured")
        return 0
    cuda = nbrmm.mr.CudaMemoryResource()
    arena = nbrmm.mr.ArenaMemoryResource(cuda, arena_size=1 << 30)
    nbrmm.mr.set_current_device_resource(arena)
    env = {"nbrmm": nbrmm, "B": nbrmm.Buffer, "mr": arena, "S": nbrmm.DEFAULT_STREAM}
    rows = [
        ("object()", median_ns("object()", env)),
        ("C++ floor: arena allocate+deallocate 256 B",
         _testing.allocate_round_trip_ns(arena, 256, 200000)),
        ("C++: GIL release+acquire pair", _testing.gil_round_trip_ns(200000)),
        ("C++: current device query", _testing.current_device_ns(200000)),
        ("Buffer(0, mr=arena)", median_ns("B(0, mr=mr)", env)),
        ("Buffer(256, mr=arena)", median_ns("B(256, mr=mr)", env)),
        ("Buffer(256, mr=arena, stream=DEFAULT_STREAM)", median_ns("B(256, mr=mr, stream=S)", env)),
        ("Buffer(256) (current resource)", median_ns("B(256)", env)),
        ("arena.deallocate(arena.allocate(256), 256)",
         median_ns("mr.deallocate(mr.allocate(256), 256)", env)),
        ("get_current_device_resource()", median_ns("nbrmm.mr.get_current_device_resource()", env)),
    ]
    width = max(len(r[0]) for r in rows)
    for name, ns in rows:
        print(f"{name:<{width}}  {ns:8.1f} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
