"""Where the nanoseconds of ``Buffer(256, mr=arena)``, of ``cupy.empty(256)`` through the
CuPy hook and of a cuda.core ``allocate(256)`` + ``close()`` through the adapter go: timeit
figures of their parts, side by side in one process. The statements are timed round-robin
(one repeat of each in turn) so that drift of the machine touches all of them alike; each row gives the median and the
minimum over the repeats. Run on a GPU machine: ``python benchmarks/breakdown.py``."""

import statistics
import sys
import timeit

import nbrmm
import nbrmm.mr

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "tests"))
from extensions import testing as _testing  # noqa: E402  (the C++ timing loops)

NUMBER = 20000
REPEAT = 31


def interleaved(fns):
    """{name: [ns, one per repeat]} for measurements (``fn() -> ns``) taken in turn, one of
    each per repeat."""
    runs = {name: [] for name in fns}
    for _ in range(REPEAT):
        for name, fn in fns.items():
            runs[name].append(fn())
    return runs


def round_robin(stmts, env):
    """{name: [ns per run, one per repeat]} for every (name, statement[, setup])."""
    timers = {
        name: timeit.Timer(stmt, setup=rest[0] if rest else "pass", globals=env)
        for name, stmt, *rest in stmts
    }
    return interleaved(
        {name: (lambda t=timer: t.timeit(NUMBER) / NUMBER * 1e9) for name, timer in timers.items()}
    )


def cpp_runs(fn):
    return [fn() for _ in range(REPEAT)]


def main():
    if nbrmm.get_device_count() == 0:
        print("breakdown: no GPU, nothing measured")
        return 0
    cuda = nbrmm.mr.CudaMemoryResource()
    arena = nbrmm.mr.ArenaMemoryResource(cuda, arena_size=1 << 30)
    pool = nbrmm.mr.PoolMemoryResource(cuda, initial_pool_size=1 << 30)
    nbrmm.mr.set_current_device_resource(arena)
    env = {"nbrmm": nbrmm, "T": _testing, "B": nbrmm.Buffer, "mr": arena, "pool": pool, "cuda": cuda,
           "S": nbrmm.DEFAULT_STREAM, "make": lambda: nbrmm.Buffer(256, mr=arena)}
    stmts = [
        ("timeit loop (pass)", "pass"),
        ("object()", "object()"),
        ("Buffer(0, mr=arena)", "B(0, mr=mr)"),
        ("Buffer(0, mr=pool)", "B(0, mr=pool)"),
        ("Buffer(0, mr=cuda)", "B(0, mr=cuda)"),
        ("Buffer(256, mr=arena)", "B(256, mr=mr)"),
        ("Buffer(256, mr=arena, stream=DEFAULT_STREAM)", "B(256, mr=mr, stream=S)"),
        ("Buffer(256) (current resource)", "B(256)"),
        ("make() = lambda: Buffer(256, mr=arena)", "make()"),
        ("Buffer(256, mr=pool)", "B(256, mr=pool)"),
        ("arena.deallocate(arena.allocate(256), 256)", "mr.deallocate(mr.allocate(256), 256)"),
        ("get_current_device_resource()", "nbrmm.mr.get_current_device_resource()"),
    ]
    try:
        import cupy

        import nbrmm.allocators.cupy as cupy_hooks
    except ImportError:
        cupy = None
    if cupy is not None:
        cupy_pool = cupy.cuda.MemoryPool()
        hook = cupy_hooks.cupy_allocator(mr=arena)
        env.update(cupy=cupy, E=cupy.empty, u1=cupy.uint8, hook=hook, cupy_pool=cupy_pool)
        on_hook = "cupy.cuda.set_allocator(hook)"
        stmts += [
            ("cupy.empty(256): CuPy's MemoryPool", "E(256, dtype=u1)",
             "cupy.cuda.set_allocator(cupy_pool.malloc)"),
            ("cupy.empty(256): nbrmm hook over arena", "E(256, dtype=u1)", on_hook),
            ("CuPy's MemoryPool: malloc(256) alone", "cupy_pool.malloc(256)"),
            ("nbrmm hook: hook(256) alone", "hook(256)", on_hook),
            ("  its parts: _lend_memory(256, arena, DEFAULT_STREAM) + free",
             "L(256, mr, S)"),
            ("  its parts: cupy.cuda.get_device_id()", "cupy.cuda.get_device_id()"),
            ("  its parts: cupy.cuda.get_current_stream(0)", "cupy.cuda.get_current_stream(0)"),
            ("  its parts: UnownedMemory(ptr, 256, owner, 0)", "UM(P, 256, O, 0)"),
            ("  its parts: MemoryPointer(UnownedMemory(...), 0)", "MP(UM(P, 256, O, 0), 0)"),
        ]
        env.update(L=nbrmm._nbrmm._lend_memory, UM=cupy.cuda.UnownedMemory,
                   MP=cupy.cuda.MemoryPointer, P=1 << 40, O=object())
    try:
        import cuda.core as cc

        from nbrmm import interop
    except ImportError:
        cc = None
    if cc is not None:
        device = cc.Device()
        device.set_current()
        default_mr = device.memory_resource
        adapter = interop.NbrmmMemoryResource(arena)

        class Nothing(cc.MemoryResource):
            """A cuda.core resource in Python that allocates nothing."""

            def allocate(self, size, *, stream):
                return cc.Buffer.from_handle(1 << 40, size, self, stream=stream)

            def deallocate(self, ptr, size, *, stream):
                pass

            is_device_accessible = True
            is_host_accessible = False
            is_managed = False
            device_id = 0

        env.update(cc_stream=device.default_stream, adapter=adapter, cc_default=default_mr,
                   nothing=Nothing())
        stmts += [
            ("cuda.core allocate(256)+close(): default resource",
             "cc_default.allocate(256, stream=cc_stream).close()"),
            ("cuda.core allocate(256)+close(): nbrmm adapter over arena",
             "adapter.allocate(256, stream=cc_stream).close()"),
            ("cuda.core allocate(256)+close(): a resource that allocates nothing",
             "nothing.allocate(256, stream=cc_stream).close()"),
            ("  arena.deallocate(arena.allocate(256, s), 256, s), s: cuda.core stream",
             "mr.deallocate(mr.allocate(256, cc_stream), 256, cc_stream)"),
            ("  cuda.core stream's __cuda_stream__()", "cc_stream.__cuda_stream__()"),
        ]
    runs = round_robin(stmts, env)
    if cupy is not None:
        cupy.cuda.set_allocator(None)
    # The torch hook's functions of a slot bound to the arena, in turn with the floor.
    slot = nbrmm._nbrmm._torch_bind(arena)
    runs.update(interleaved({
        "C++ floor: arena allocate+deallocate 256 B":
            lambda: _testing.allocate_round_trip_ns(arena, 256, 100000),
        "C++: torch hook alloc+free 256 B (slot bound to arena)":
            lambda: _testing.torch_hook_round_trip_ns(slot, 256, 100000),
    }))
    runs["C++ floor: pool allocate+deallocate 256 B"] = cpp_runs(
        lambda: _testing.allocate_round_trip_ns(pool, 256, 100000))
    runs["C++: rmm::device_buffer(0, arena)"] = cpp_runs(
        lambda: _testing.device_buffer_round_trip_ns(arena, 0, 100000))
    runs["C++: GIL release+acquire pair"] = cpp_runs(lambda: _testing.gil_round_trip_ns(100000))
    runs["C++: current device query"] = cpp_runs(lambda: _testing.current_device_ns(100000))
    width = max(len(name) for name in runs)
    print(f"{'':<{width}}  {'median':>8}  {'min':>8}   (ns; {REPEAT} repeats)")
    for name, values in runs.items():
        print(f"{name:<{width}}  {statistics.median(values):8.1f}  {min(values):8.1f}")
    floor = statistics.median(runs["C++ floor: arena allocate+deallocate 256 B"])
    over = statistics.median(runs["Buffer(256, mr=arena)"]) - floor
    loop = statistics.median(runs["timeit loop (pass)"])
    print(f"\nBuffer(256, mr=arena) − C++ floor: {over:.0f} ns "
          f"({over - loop:.0f} ns without the timing loop's own {loop:.0f} ns)")
    torch_slot = statistics.median(runs["C++: torch hook alloc+free 256 B (slot bound to arena)"])
    print(f"torch hook alloc+free − C++ floor: {torch_slot - floor:.0f} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
