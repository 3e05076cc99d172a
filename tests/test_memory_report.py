"""nbrmm.memory's snapshot files and report: ``Snapshot.dump``/``Snapshot.load`` (PyTorch's
memory-snapshot pickle format), ``Snapshot.to_html`` and ``python -m nbrmm.memory``.

Everything runs on synthetic snapshots, without a GPU. Where PyTorch is installed, its own
readers (``torch.cuda._memory_viz``: ``trace_plot``, ``segment_plot``, ``segsum``,
``trace``, the flame-graph inputs and its command line) read what nbrmm writes; the test
that reads a snapshot recorded by PyTorch itself also needs a GPU. The report is rendered
in headless Chromium where one is installed (chromium, chromium-browser or google-chrome
on PATH, or Playwright's Chromium); ``NBRMM_MEMORY_SCREENSHOT=path.png`` keeps the
screenshot that the browser test takes.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import html.parser
import itertools
import json
import os
import pickle
import pickletools
import re
import struct
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest

from nbrmm.memory import (
    Allocation,
    Event,
    Frame,
    ResourceInfo,
    Snapshot,
    _html,
    _torch_format,
)
from nbrmm.memory._torch_format import SnapshotFormatError

from helpers import browser_env, run_python

MiB = 1 << 20
GiB = 1 << 30
T0 = 1_765_432_100_000_000_000  # ns since the epoch
MS = 1_000_000

EVIL_TAG = "<script>alert('tag')</script>"
QUOTE_TAG = 'a "quoted" & <b>bold</b> tag'
EVIL_FRAME = Frame("/work/app/<evil>&co.py", 1, "make<T>")

MAIN = Frame("/work/app/main.py", 99, "<module>")
PREP = Frame("/work/app/prep.py", 13, "normalize")
MODEL = Frame("/work/app/model.py", 7, "forward")
LOADER = Frame("/work/app/loader.py", 42, "load_batch")

A_PREP = 0x7F20_0000_0000
A_CORE = A_PREP + 64 * MiB  # right after the preprocess allocation
A_NATIVE = 0x7F40_0000_0000
A_GHOST = 0x7F50_0000_0000
A_BEFORE_0 = 0x7F10_0000_0000
A_BEFORE_1 = 0x7F30_0000_0000
A_TORCH = 0x7E00_0000_0000
A_HOST = 0x5555_0000_0000
A_QUOTE = 0x5555_1000_0000


def make_snapshot() -> Snapshot:
    """Devices 0, 1 and host memory (-1); several tags; frees of memory allocated before
    recording; a failed allocation; a live allocation whose event was dropped."""
    events = (
        Event(T0, "free", A_BEFORE_0, 8 * MiB, 0, 1, "numba", "numba", (), True),
        Event(T0 + 1 * MS, "alloc", A_PREP, 64 * MiB, 0, 1, "preprocess", "cupy", (PREP, MAIN)),
        Event(T0 + 2 * MS, "alloc", A_TORCH, 256 * MiB, 1, 7, "torch", "torch", (MODEL, MAIN)),
        Event(T0 + 3 * MS, "alloc", A_CORE, 16 * MiB, 0, 1, "cuda.core", "cuda.core", (LOADER,)),
        Event(T0 + 4 * MS, "failed_alloc", 0, 80 * GiB, 1, 7, "torch", "torch", (MODEL, MAIN)),
        Event(T0 + 5 * MS, "alloc", A_HOST, 2 * MiB, -1, 0, EVIL_TAG, "nbrmm", (EVIL_FRAME,)),
        Event(T0 + 6 * MS, "free", A_TORCH, 256 * MiB, 1, 7, "torch", "torch", ()),
        Event(T0 + 7 * MS, "alloc", A_TORCH, 128 * MiB, 1, 7, "torch", "torch", (MODEL, MAIN)),
        Event(T0 + 8 * MS, "free", A_BEFORE_1, 1 * MiB, 0, 0, "native", "native", (), True),
        Event(T0 + 9 * MS, "alloc", A_NATIVE, 4096, 0, 0, "native", "native", ()),
        Event(T0 + 10 * MS, "alloc", A_QUOTE, 3000, -1, 0, QUOTE_TAG, "nbrmm", (MAIN,)),
    )
    allocations = (
        Allocation(T0 + 5 * MS, A_HOST, 2 * MiB, -1, 0, EVIL_TAG, "nbrmm", (EVIL_FRAME,)),
        Allocation(T0 + 10 * MS, A_QUOTE, 3000, -1, 0, QUOTE_TAG, "nbrmm", (MAIN,)),
        Allocation(T0 + 7 * MS, A_TORCH, 128 * MiB, 1, 7, "torch", "torch", (MODEL, MAIN)),
        Allocation(T0 + 1 * MS, A_PREP, 64 * MiB, 0, 1, "preprocess", "cupy", (PREP, MAIN)),
        Allocation(T0 + 3 * MS, A_CORE, 16 * MiB, 0, 1, "cuda.core", "cuda.core", (LOADER,)),
        Allocation(T0 + 9 * MS, A_NATIVE, 4096, 0, 0, "native", "native", ()),
        # Allocated while recording, its event dropped from the full history.
        Allocation(T0 - 1000 * MS, A_GHOST, 32 * MiB, 0, 1, "cupy", "cupy", (LOADER, MAIN)),
    )
    resources = (
        ResourceInfo(0, 0, "LimitingResourceAdaptor", None, 112 * MiB, 40 * GiB),
        ResourceInfo(0, 1, "PoolMemoryResource", 1 * GiB, None, None),
        ResourceInfo(0, 2, "CudaMemoryResource"),
        ResourceInfo(1, 0, "CudaAsyncMemoryResource", None, 128 * MiB, None),
        ResourceInfo(-1, 0, "PinnedHostMemoryResource<Evil&Co>"),
    )
    return Snapshot(allocations, events, resources, dropped_events=5)


TAGS = ["preprocess", "torch", "cuda.core", "native", "numba", "cupy", EVIL_TAG, QUOTE_TAG]


@pytest.fixture
def snapshot() -> Snapshot:
    return make_snapshot()


@pytest.fixture
def dumped(tmp_path: Path, snapshot: Snapshot) -> Path:
    path = tmp_path / "snapshot.pickle"
    snapshot.dump(path)
    return path


def raw(path: Path) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f)


# --------------------------------------------------------------------------------------
# Round trip
# --------------------------------------------------------------------------------------


def test_dump_and_load_give_back_an_equal_snapshot(dumped: Path, snapshot: Snapshot) -> None:
    loaded = Snapshot.load(dumped)
    assert loaded == snapshot
    assert loaded.bytes_by_tag() == snapshot.bytes_by_tag()
    # Field by field too, so that a failure says which part differs.
    for name in ("allocations", "events", "resources", "dropped_events"):
        assert getattr(loaded, name) == getattr(snapshot, name), name
    assert all(type(f) is Frame for e in loaded.events for f in e.frames)


@pytest.mark.parametrize(
    "snap",
    [
        Snapshot(),
        Snapshot(dropped_events=3),
        Snapshot(events=(Event(5, "alloc", 0x1000, 0, -1, 0, "", "native"),)),
        Snapshot(
            allocations=(Allocation(0, 0x10, 1, 3, 2**63 - 1, "x" * 300, "cupy"),),
            resources=(ResourceInfo(-1, 0, "é ü 中文", 0, 0, 0),),
        ),
    ],
    ids=["empty", "dropped-only", "zero-size-host", "device-3-no-events"],
)
def test_round_trip_of_edge_cases(tmp_path: Path, snap: Snapshot) -> None:
    path = tmp_path / "s.pickle"
    snap.dump(path)
    assert Snapshot.load(path) == snap


# --------------------------------------------------------------------------------------
# PyTorch's format
# --------------------------------------------------------------------------------------

#: The opcodes that PyTorch's in-browser viewer (MemoryViz.js, which has a pickle reader
#: of its own) understands.
VIEWER_OPCODES = {
    "PROTO", "FRAME", "STOP", "MARK", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET",
    "LONG_BINGET", "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_LIST", "LIST",
    "APPEND", "APPENDS", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "BININT",
    "BININT1", "BININT2", "LONG1", "SHORT_BINUNICODE", "BINUNICODE", "NEWTRUE", "NEWFALSE",
    "NONE", "BINFLOAT",
}  # fmt: skip


def test_the_pickle_is_plain_data_that_the_browser_viewer_reads(dumped: Path) -> None:
    data = dumped.read_bytes()
    ops = list(pickletools.genops(data))
    protocol = ops[0][1]
    assert ops[0][0].name == "PROTO" and isinstance(protocol, int)
    assert 2 <= protocol <= 4, "the viewer reads protocols 2 to 4"
    used = {op.name for op, _, _ in ops}
    assert used <= VIEWER_OPCODES, f"opcodes the viewer cannot read: {used - VIEWER_OPCODES}"
    # The viewer rewrites trace entries, segments and blocks in place: none may be shared.
    d = raw(dumped)
    objects = (
        [e for trace in d["device_traces"] for e in trace]
        + d["segments"]
        + [b for s in d["segments"] for b in s["blocks"]]
    )
    assert len({id(o) for o in objects}) == len(objects)


def _frame_ok(f: object) -> bool:
    return (
        isinstance(f, dict)
        and isinstance(f.get("filename"), str)
        and isinstance(f.get("line"), int)
        and isinstance(f.get("name"), str)
    )


def test_the_pickle_has_pytorchs_keys_and_types(dumped: Path, snapshot: Snapshot) -> None:
    d = raw(dumped)
    assert {"segments", "device_traces", "allocator_settings", "nbrmm"} <= set(d)
    traces = d["device_traces"]
    # Devices 0 and 1, then host memory after the last CUDA device.
    assert len(traces) == 3
    assert d["nbrmm"]["host_device_index"] == 2
    n_entries = 0
    for device, trace in enumerate(traces):
        assert isinstance(trace, list) and trace
        times = [t["time_us"] for t in trace]
        assert times == sorted(times)
        for t in trace:
            n_entries += 1
            action = t["action"]
            assert action in ("alloc", "free_requested", "free_completed", "oom", "snapshot")
            assert isinstance(t["size"], int) and isinstance(t["stream"], int)
            assert isinstance(t["time_us"], int) and isinstance(t["frames"], list)
            assert all(_frame_ok(f) for f in t["frames"])
            if action == "oom":
                # As PyTorch writes it: the free memory in place of an address.
                assert "addr" not in t and isinstance(t["device_free"], int)
            else:
                assert isinstance(t["addr"], int)
            if action != "snapshot":
                assert isinstance(t["user_metadata"], str) and t["category"] in TAGS
        assert trace[-1]["action"] == "snapshot" and trace[-1]["category"] == "unknown"
    # Each event: one entry, two for a free, plus the snapshot marker of each device.
    frees = sum(e.action == "free" for e in snapshot.events)
    assert n_entries == len(snapshot.events) + frees + len(traces)

    expected = []
    for e in snapshot.events:
        index = 2 if e.device < 0 else e.device
        actions = {
            "alloc": ["alloc"],
            "free": ["free_requested", "free_completed"],
            "failed_alloc": ["oom"],
        }[e.action]
        for a in actions:
            expected.append((index, a, e.size, e.stream, e.time_ns // 1000, e.tag))
    got = [
        (i, t["action"], t["size"], t["stream"], t["time_us"], t["category"])
        for i, trace in enumerate(traces)
        for t in trace
        if t["action"] != "snapshot"
    ]
    assert sorted(got) == sorted(expected)

    # The tag rides in a synthetic first frame; the recorded frames follow in order.
    alloc = next(t for t in traces[0] if t["action"] == "alloc" and t["addr"] == A_PREP)
    assert alloc["frames"] == [
        {"filename": "<nbrmm tag=preprocess>", "line": 0, "name": "cupy"},
        {"filename": PREP.filename, "line": PREP.line, "name": PREP.name},
        {"filename": MAIN.filename, "line": MAIN.line, "name": MAIN.name},
    ]
    assert alloc["user_metadata"] == "tag=preprocess library=cupy"
    oom = next(t for t in traces[1] if t["action"] == "oom")
    assert oom["size"] == 80 * GiB and oom["device_free"] == 0

    settings = d["allocator_settings"]
    assert settings["trace_alloc_overflowed"] is True
    assert settings["nbrmm_dropped_events"] == 5
    assert len(settings["nbrmm_resources"]) == len(snapshot.resources)


def test_segments_hold_the_live_allocations_and_every_address_of_the_trace(
    dumped: Path, snapshot: Snapshot
) -> None:
    d = raw(dumped)
    active = set()
    for seg in d["segments"]:
        assert seg["segment_type"] in ("small", "large")
        assert seg["segment_pool_id"] == (0, 0) and seg["is_expandable"] is False
        assert isinstance(seg["stream"], int) and isinstance(seg["frames"], list)
        address = seg["address"]
        allocated = 0
        for b in seg["blocks"]:
            # Contiguous: the viewer computes each block's address from the sizes.
            assert b["address"] == address
            assert b["state"] in ("active_allocated", "inactive")
            assert isinstance(b["requested_size"], int) and b["requested_size"] <= b["size"]
            assert all(_frame_ok(f) for f in b["frames"])
            if b["state"] == "active_allocated":
                active.add((seg["device"], b["address"], b["size"]))
                allocated += b["size"]
                assert b["frames"][0]["filename"].startswith("<nbrmm tag=")
            address += b["size"]
        assert address == seg["address"] + seg["total_size"], "blocks must fill the segment"
        assert seg["allocated_size"] == seg["active_size"] == allocated
    assert active == {
        (2 if a.device < 0 else a.device, a.address, a.size) for a in snapshot.allocations
    }
    # Disjoint per device, and every address that the trace names lies in one of them
    # (the viewer's "Allocator State History" replays the trace over the segments).
    for device, trace in enumerate(d["device_traces"]):
        segs = sorted(
            (s["address"], s["address"] + s["total_size"])
            for s in d["segments"]
            if s["device"] == device
        )
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(segs))
        for t in trace:
            if t["action"] in ("alloc", "free_requested", "free_completed"):
                assert any(lo <= t["addr"] < hi for lo, hi in segs), hex(t["addr"])
    # The two allocations of device 0 laid side by side share one segment.
    seg = next(s for s in d["segments"] if s["address"] == A_PREP)
    assert seg["total_size"] == 80 * MiB and len(seg["blocks"]) == 2


def test_load_reads_a_dump_whose_nbrmm_entry_was_dropped(
    tmp_path: Path, dumped: Path, snapshot: Snapshot
) -> None:
    """Through PyTorch's fields alone, tags, libraries and frames survive."""
    d = raw(dumped)
    del d["nbrmm"]
    path = tmp_path / "torch-only.pickle"
    path.write_bytes(pickle.dumps(d))
    loaded = Snapshot.load(path)

    def view(e: Event) -> tuple:
        return (e.action, e.size, e.tag, e.library, e.frames, e.before_recording)

    assert [view(e) for e in loaded.events] == [view(e) for e in snapshot.events]
    assert [e.time_ns for e in loaded.events] == [e.time_ns // 1000 * 1000 for e in snapshot.events]
    assert {(a.address, a.size, a.tag, a.frames) for a in loaded.allocations} == {
        (a.address, a.size, a.tag, a.frames) for a in snapshot.allocations
    }
    assert loaded.resources == () and loaded.dropped_events == 0


def torch_style_snapshot() -> dict:
    """A snapshot as ``torch.cuda.memory._snapshot()`` returns it (PyTorch 2.x)."""

    def frames(*fs: Frame) -> list[dict]:
        return [{"filename": f.filename, "line": f.line, "name": f.name} for f in fs]

    base = 0x7F00_0000_0000
    return {
        "segments": [
            {
                "device": 0, "address": base, "total_size": 20 * MiB, "allocated_size": 6 * MiB,
                "active_size": 6 * MiB, "requested_size": 6 * MiB - 100, "stream": 0,
                "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
                "frames": [],
                "blocks": [
                    {"address": base, "size": 2 * MiB, "requested_size": 2 * MiB - 100,
                     "state": "active_allocated", "frames": frames(MODEL, MAIN)},
                    {"address": base + 2 * MiB, "size": 2 * MiB, "requested_size": 0,
                     "state": "inactive", "frames": []},
                    {"address": base + 4 * MiB, "size": 4 * MiB, "requested_size": 4 * MiB,
                     "state": "active_allocated", "frames": []},
                    {"address": base + 8 * MiB, "size": 12 * MiB, "requested_size": 0,
                     "state": "inactive", "frames": []},
                ],
            },
        ],
        "device_traces": [
            [
                {"action": "segment_alloc", "addr": base, "size": 20 * MiB, "stream": 0,
                 "time_us": 1_000, "frames": frames(MODEL)},
                {"action": "alloc", "addr": base, "size": 2 * MiB, "stream": 0,
                 "time_us": 1_001, "frames": frames(MODEL, MAIN)},
                {"action": "alloc", "addr": base + 2 * MiB, "size": 2 * MiB, "stream": 0,
                 "time_us": 1_002, "frames": frames(PREP)},
                {"action": "free_requested", "addr": base + 2 * MiB, "size": 2 * MiB,
                 "stream": 0, "time_us": 1_003, "frames": frames(PREP)},
                {"action": "free_completed", "addr": base + 2 * MiB, "size": 2 * MiB,
                 "stream": 0, "time_us": 1_003, "frames": frames(PREP)},
                {"action": "free_requested", "addr": base + 9 * MiB, "size": MiB,
                 "stream": 0, "time_us": 1_004, "frames": []},
                {"action": "free_completed", "addr": base + 9 * MiB, "size": MiB,
                 "stream": 0, "time_us": 1_004, "frames": []},
                {"action": "oom", "device_free": 123, "size": 40 * GiB, "stream": 0,
                 "time_us": 1_005, "frames": frames(LOADER)},
                {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": 1_006,
                 "frames": []},
            ],
            [],
        ],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1},
    }  # fmt: skip


def test_load_reads_a_pytorch_pickle(tmp_path: Path) -> None:
    path = tmp_path / "torch.pickle"
    path.write_bytes(pickle.dumps(torch_style_snapshot(), protocol=2))
    s = Snapshot.load(path)
    base = 0x7F00_0000_0000
    assert [(e.action, e.address, e.size, e.before_recording) for e in s.events] == [
        ("alloc", base, 2 * MiB, False),
        ("alloc", base + 2 * MiB, 2 * MiB, False),
        ("free", base + 2 * MiB, 2 * MiB, False),
        ("free", base + 9 * MiB, MiB, True),  # its allocation is not in the trace
        ("failed_alloc", 0, 40 * GiB, False),
    ]
    assert {(e.tag, e.library, e.device) for e in s.events} == {("torch", "torch", 0)}
    assert s.events[0].frames == (MODEL, MAIN) and s.events[0].time_ns == 1_001_000
    # The live allocations: the active blocks, at their requested size.
    assert [(a.address, a.size, a.frames, a.time_ns) for a in s.allocations] == [
        (base, 2 * MiB - 100, (MODEL, MAIN), 1_001_000),
        (base + 4 * MiB, 4 * MiB, (), 0),  # allocated before the trace
    ]
    assert s.bytes_by_tag() == {"torch": 6 * MiB - 100}
    assert s.resources == () and s.dropped_events == 0


def test_load_reads_pytorchs_oldest_layout(tmp_path: Path) -> None:
    """PyTorch 1.13 and 2.0: frames and sizes in a per-block history; a bare list."""
    segments = [
        {"device": 1, "address": 4096, "total_size": 8192, "stream": 0, "blocks": [
            {"size": 4096, "state": "active_allocated",
             "history": [{"addr": 4096, "real_size": 1000,
                          "frames": [{"filename": "a.py", "line": 3, "name": "f"}]}]},
            {"size": 4096, "state": "inactive"},
        ]},
    ]  # fmt: skip
    path = tmp_path / "old.pickle"
    path.write_bytes(pickle.dumps(segments, protocol=2))
    s = Snapshot.load(path)
    assert s.events == ()
    assert [(a.device, a.address, a.size, a.frames) for a in s.allocations] == [
        (1, 4096, 1000, (Frame("a.py", 3, "f"),))
    ]


class _Trap:
    """Unpickling it would run code (``_set_trap``)."""

    def __reduce__(self) -> tuple:
        return (_set_trap, ())


TRAPPED: list[bool] = []


def _set_trap() -> None:
    TRAPPED.append(True)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"Thread,Time,Action\n1,2,3\n", "not a memory snapshot pickle"),
        (b"", "not a memory snapshot pickle"),
        (pickle.dumps(42), "not a memory snapshot: a pickled int"),
        (pickle.dumps({"hello": 1}), "no 'segments', 'device_traces' or 'nbrmm' key"),
        (pickle.dumps([1, 2, 3]), "not a valid memory snapshot"),
        (pickle.dumps({"device_traces": [[{"action": "alloc"}]]}), "not a valid memory"),
        (pickle.dumps({"nbrmm": {"version": 99}}), "format version 99"),
        (pickle.dumps({"segments": [], "x": _Trap()}), "plain data only"),
    ],
    ids=["csv", "empty", "int", "other-dict", "list-of-ints", "bad-entry", "version",
         "code"],
)  # fmt: skip
def test_load_refuses_what_is_not_a_snapshot(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    with pytest.raises(SnapshotFormatError, match=re.escape(message)) as info:
        Snapshot.load(path)
    assert str(path) in str(info.value)
    assert not TRAPPED, "load ran code from the file"


def test_load_survives_a_key_nested_deeper_than_the_stack(tmp_path: Path) -> None:
    """A dict key that is a tuple nested two million deep (2 MB): CPython hashes it
    recursively in C while unpickling, which overflowed the stack of the loading thread."""
    path = tmp_path / "deep.pickle"
    path.write_bytes(b"\x80\x02}K\x00" + b"\x85" * 2_000_000 + b"K\x01s.")
    done = run_python(f"""
        import nbrmm.memory
        try:
            nbrmm.memory.Snapshot.load({str(path)!r})
        except nbrmm.memory.SnapshotFormatError as e:
            print("refused:", e)
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused:" in done.stdout and "no 'segments', 'device_traces' or 'nbrmm' key" in done.stdout


def test_load_refuses_a_truncated_dump(tmp_path: Path, dumped: Path) -> None:
    data = dumped.read_bytes()
    path = tmp_path / "cut.pickle"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SnapshotFormatError):
        Snapshot.load(path)


# --------------------------------------------------------------------------------------
# Hostile files: load bounds its work and the values it reads
# --------------------------------------------------------------------------------------


def _event_dict(**fields: object) -> dict:
    e = {"time_ns": T0, "action": "alloc", "address": A_PREP, "size": 1, "device": 0,
         "stream": 0, "tag": "t", "library": "nbrmm", "frames": [],
         "before_recording": False}  # fmt: skip
    e.update(fields)
    return e


def _nbrmm_data(events: list, allocations: list | None = None) -> dict:
    return {"nbrmm": {"version": 1, "events": events, "allocations": allocations or [],
                      "resources": [], "dropped_events": 0}}  # fmt: skip


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "hostile.pickle"
    path.write_bytes(pickle.dumps(data, protocol=4))
    return path


@pytest.mark.parametrize("part", ["device_traces", "segments"])
def test_load_refuses_more_entries_than_the_file_has_bytes(tmp_path: Path, part: str) -> None:
    # Shared references: 400 KB that would unfold into 10**9 entries.
    if part == "device_traces":
        trace = [{"action": "alloc", "addr": 1, "size": 1}] * 100_000
        data = {"device_traces": [trace] * 10_000}
    else:
        segment = {"address": 0, "blocks": [{"size": 1, "state": "inactive"}] * 100_000}
        data = {"segments": [segment] * 10_000}
    path = _write(tmp_path, data)
    assert path.stat().st_size < 500_000
    with pytest.raises(SnapshotFormatError, match="too many entries") as info:
        Snapshot.load(path)
    assert f"a pickle of {path.stat().st_size} bytes" in str(info.value)
    result = cli(str(path), "-o", str(tmp_path / "out.html"))
    assert result.returncode == 2 and "too many entries" in result.stderr
    assert not (tmp_path / "out.html").exists()


def test_load_reads_a_frame_list_shared_by_many_entries_once(tmp_path: Path) -> None:
    # PyTorch shares the frame list of one stack between its entries: counted once.
    frames = [{"filename": f"f{i}.py", "line": i, "name": "g"} for i in range(200)]
    trace = [{"action": "alloc", "addr": 256 * i, "size": 1, "frames": frames}
             for i in range(5000)]  # fmt: skip
    path = _write(tmp_path, {"device_traces": [trace], "segments": []})
    assert path.stat().st_size < 5000 * 200
    loaded = Snapshot.load(path)
    assert len(loaded.events) == 5000 and len(loaded.events[0].frames) == 200
    assert loaded.events[0].frames is loaded.events[-1].frames
    again = tmp_path / "again.pickle"
    loaded.dump(again)
    assert Snapshot.load(again) == loaded


def test_from_dict_reads_at_most_max_entries() -> None:
    data = {"device_traces": [[{"action": "alloc", "addr": 1, "size": 1}] * 10]}
    assert len(_torch_format.from_dict(data, max_entries=11).events) == 10
    with pytest.raises(SnapshotFormatError, match=r"more than max_entries \(10\)"):
        _torch_format.from_dict(data, max_entries=10)
    assert _torch_format.MAX_ENTRIES >= 10**8


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("time_ns", 10**5000, "event time_ns: expected an integer from"),
        ("time_ns", -(2**63) - 1, "event time_ns"),
        ("size", 10**400, "event size: expected an integer from 0"),
        ("size", -1, "event size"),
        ("address", 2**64, "event address"),
        ("stream", -1, "event stream"),
        ("device", 10**12, "event device: expected an integer from -1 to 65535"),
        ("device", -2, "event device"),
        ("frames", [("f.py", 2**31, "g")], "event frames"),
        ("time_ns", "1", "event time_ns: expected an integer, got '1'"),
    ],
    ids=["huge-time", "time-below-int64", "huge-size", "negative-size", "address",
         "stream", "huge-device", "device-below-host", "frame-line", "string"],
)  # fmt: skip
def test_load_refuses_numbers_out_of_range(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    path = _write(tmp_path, _nbrmm_data([_event_dict(**{field: value})]))
    with pytest.raises(SnapshotFormatError, match=re.escape(message)) as info:
        Snapshot.load(path)
    assert len(str(info.value)) < 300


@pytest.mark.parametrize(
    "data, message",
    [
        ({"device_traces": [[{"action": "alloc", "addr": 1, "size": 1, "time_us": 10**30}]]},
         "time_us"),
        ({"device_traces": [[]] * 65537}, "nbrmm reads devices 0 to 65535"),
        ({"segments": [{"address": 2**64, "blocks": []}]}, "segment address"),
        ({"segments": [{"address": 0, "blocks": [{"size": -1}]}]}, "block size"),
    ],
    ids=["time_us", "devices", "segment-address", "block-size"],
)  # fmt: skip
def test_load_refuses_pytorch_numbers_out_of_range(
    tmp_path: Path, data: dict, message: str
) -> None:
    with pytest.raises(SnapshotFormatError, match=re.escape(message)):
        Snapshot.load(_write(tmp_path, data))


def _nested_pickle(data: dict, depth: int) -> bytes:
    """``data`` pickled with the string "NESTED" replaced by a list nested ``depth`` deep."""
    raw = pickle.dumps(data, protocol=2)
    marker = b"X\x06\x00\x00\x00NESTED"
    assert raw.count(marker) == 1
    return raw.replace(marker, b"]" * depth + b"a" * (depth - 1))  # EMPTY_LIST, APPEND


@pytest.mark.parametrize("field", ["time_ns", "frames", "tag"])
def test_load_refuses_deeply_nested_values_with_a_short_message(
    tmp_path: Path, field: str
) -> None:
    path = tmp_path / "deep.pickle"
    path.write_bytes(_nested_pickle(_nbrmm_data([_event_dict(**{field: "NESTED"})]), 100_000))
    with pytest.raises(SnapshotFormatError, match=f"event {field}") as info:
        Snapshot.load(path)
    assert len(str(info.value)) < 300


def test_load_message_of_a_bad_version_is_short(tmp_path: Path) -> None:
    path = tmp_path / "deep.pickle"
    path.write_bytes(_nested_pickle({"nbrmm": {"version": "NESTED"}}, 100_000))
    with pytest.raises(SnapshotFormatError, match="format version") as info:
        Snapshot.load(path)
    assert len(str(info.value)) < 300


def test_dump_writes_devices_up_to_max_device_only(tmp_path: Path) -> None:
    def on(device: int) -> Snapshot:
        return Snapshot(events=(Event(T0, "alloc", A_PREP, 1, device, 0, "t", "nbrmm"),))

    path = tmp_path / "s.pickle"
    for device in (-1, _torch_format.MAX_DEVICE):
        on(device).dump(path)
        assert Snapshot.load(path) == on(device)
    for device in (_torch_format.MAX_DEVICE + 1, 10**12, -2):
        with pytest.raises(ValueError, match=f"device {device}: nbrmm writes devices -1"):
            on(device).dump(path)


@pytest.mark.parametrize("path", ["fd", True, b"s.pickle", None])
def test_paths_are_str_or_pathlike_never_a_file_descriptor(path: object) -> None:
    r, w = os.pipe()
    try:
        for call in (Snapshot().dump, Snapshot().to_html, Snapshot.load):
            with pytest.raises(TypeError, match="^path: expected a str or os.PathLike, got "):
                call(w if path == "fd" else path)  # type: ignore[arg-type]
        os.write(w, b"x")  # still open
    finally:
        os.close(r)
        os.close(w)


def test_a_report_that_cannot_be_made_leaves_the_old_file_alone(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_text("previous report")
    bad = Snapshot(events=(Event(10**5000, "alloc", 0, 1, 0, 0, "t", "nbrmm"),))
    with pytest.raises(ValueError):
        bad.to_html(out)
    with pytest.raises(ValueError):
        Snapshot(events=(Event(0, "alloc", 0, 1, 10**12, 0, "t", "nbrmm"),)).dump(out)
    assert out.read_text() == "previous report"


def test_lone_surrogates_are_written_escaped(tmp_path: Path) -> None:
    # A tag decoded from undecodable bytes, loaded from a file.
    frame = Frame("/work/app/f\udcff.py", 3, "g")
    snap = Snapshot(allocations=(Allocation(T0, A_PREP, 10, 0, 0, "t\udcff", "nbrmm", (frame,)),))
    path = tmp_path / "s.pickle"
    snap.dump(path)
    assert Snapshot.load(path) == snap
    snap.to_html(tmp_path / "s.html")
    page = (tmp_path / "s.html").read_text(encoding="utf-8")
    assert "t\\udcff" in page and "f\\udcff.py" in page


# --------------------------------------------------------------------------------------
# PyTorch's own readers (where PyTorch is installed)
# --------------------------------------------------------------------------------------


@pytest.fixture
def memory_viz() -> types.ModuleType:
    torch = pytest.importorskip(
        "torch", reason="PyTorch is not installed: its memory-snapshot readers cannot run"
    )
    import torch.cuda._memory_viz as memory_viz

    assert torch.__version__
    return memory_viz


def _payload(page: str) -> dict:
    """The snapshot that a ``trace_plot``/``segment_plot`` page embeds."""
    m = re.search(r"const local_files = (\[.*?\])\s*\n", page)
    assert m, "no embedded snapshot in the page"
    files = json.loads(m[1])
    return pickle.loads(base64.b64decode(files[0]["base64"]))


def test_pytorch_plots_read_the_dump(
    memory_viz: types.ModuleType, dumped: Path, snapshot: Snapshot
) -> None:
    data = raw(dumped)
    page = memory_viz.trace_plot(data)
    assert isinstance(page, str) and "<html>" in page and "Active Memory Timeline" in page
    assert _payload(page) == data
    assert _torch_format.from_dict(_payload(page)) == snapshot
    page = memory_viz.segment_plot(data)
    assert "Allocator State History" in page and _payload(page) == data


def test_pytorch_text_tools_read_the_dump(
    memory_viz: types.ModuleType, dumped: Path, snapshot: Snapshot
) -> None:
    data = raw(dumped)
    # segsum checks that each segment's blocks add up to its size.
    summary = memory_viz.segsum(data)
    live = sum(a.size for a in snapshot.allocations)
    assert f"segments: {len(data['segments'])}" in summary
    assert f"total_allocated: {memory_viz.Bytes(live)}" in summary

    trace = memory_viz.trace(data)
    for device in range(3):
        assert f"Device {device} ----" in trace
    assert trace.count("raise OutOfMemoryError") == 1
    assert trace.count("\ndel ") == sum(e.action == "free" for e in snapshot.events)

    def lines(text: str) -> str:
        return text

    flame = memory_viz.memory(data, format_flamegraph=lines)
    # Outermost frame first; the tag frame is the innermost.
    assert (
        f"main.py:99:<module>;prep.py:13:normalize;<nbrmm tag=preprocess>:0:cupy {64 * MiB}"
        in flame
    )
    assert f"<nbrmm tag=cupy>:0:cupy {32 * MiB}" in flame
    by_segment = memory_viz.segments(data, format_flamegraph=lines)
    assert f"seg_{A_PREP};active_allocated;" in by_segment


def test_pytorch_command_line_reads_the_dump(
    memory_viz: types.ModuleType, tmp_path: Path, dumped: Path
) -> None:
    def run(*args: str) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [sys.executable, "-m", "torch.cuda._memory_viz", *args],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result

    out = tmp_path / "trace.html"
    run("trace_plot", str(dumped), "-o", str(out))
    assert "Active Memory Timeline" in out.read_text()
    out = tmp_path / "segments.html"
    run("segment_plot", str(dumped), "-o", str(out))
    assert "Allocator State History" in out.read_text()
    assert "total_allocated" in run("stats", str(dumped)).stdout
    assert "Device 2" in run("trace", str(dumped)).stdout


@pytest.mark.gpu
def test_load_reads_a_snapshot_that_pytorch_recorded(
    memory_viz: types.ModuleType, tmp_path: Path
) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    path = tmp_path / "recorded.pickle"
    torch.cuda.memory._record_memory_history(max_entries=10_000, stacks="python")
    try:
        keep = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
        gone = torch.empty(5 * MiB, dtype=torch.uint8, device="cuda")
        del gone
        with pytest.raises(torch.cuda.OutOfMemoryError):
            torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
        torch.cuda.memory._dump_snapshot(str(path))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    s = Snapshot.load(path)
    device = torch.cuda.current_device()
    allocs = [e for e in s.events if e.action == "alloc" and e.device == device]
    assert [e.size for e in allocs][-2:] == [3 * MiB, 5 * MiB]
    assert allocs[-1].frames, "PyTorch records the Python frames of an allocation"
    assert any(f.name == "test_load_reads_a_snapshot_that_pytorch_recorded"
               for f in allocs[-1].frames)  # fmt: skip
    frees = [e for e in s.events if e.action == "free" and e.address == allocs[-1].address]
    assert frees and frees[-1].size == 5 * MiB
    assert [e.size for e in s.events if e.action == "failed_alloc"] == [1 << 50]
    assert any(
        a.address == keep.data_ptr() and a.size == 3 * MiB and a.tag == "torch"
        for a in s.allocations
    )
    # Written back by nbrmm, PyTorch's tools still read it.
    again = tmp_path / "again.pickle"
    s.dump(again)
    assert Snapshot.load(again) == s
    assert "total_allocated" in memory_viz.segsum(raw(again))
    del keep


# --------------------------------------------------------------------------------------
# The HTML report
# --------------------------------------------------------------------------------------


class _Checker(html.parser.HTMLParser):
    """Checks that every element is closed in order, and collects the text."""

    VOID = frozenset(
        ("meta", "col", "br", "img", "input", "link", "hr", "wbr", "source", "area", "base",
         "embed", "param", "track")
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.text: list[str] = []
        self.tags: dict[str, int] = {}
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.attrs.extend(attrs)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.attrs.extend(attrs)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def check(page: str) -> _Checker:
    c = _Checker()
    c.feed(page)
    c.close()
    assert not c.errors, c.errors[:5]
    assert not c.stack, f"not closed: {c.stack}"
    return c


def section(page: str, name: str) -> str:
    m = re.search(rf'<section id="{name}">(.*?)</section>', page, re.DOTALL)
    assert m, f"no section {name}"
    return m[1]


def test_report_is_well_formed_and_shows_tags_sites_and_resources(snapshot: Snapshot) -> None:
    page = _html.render_html(snapshot)
    c = check(page)
    text = "".join(c.text)
    assert c.tags["svg"] == 3, "one chart per device with events"
    assert c.tags["polygon"] >= 3
    for tag in TAGS:
        assert tag in text, tag
        assert tag in section(page, "tags") or html.escape(tag) in section(page, "tags")
    for frame in (PREP, MODEL, LOADER):
        assert str(frame) in text
    for r in snapshot.resources:
        assert r.name in text
    assert "112 MiB" in section(page, "resources") and "40 GiB" in section(page, "resources")
    # Call sites by live bytes: model.py (128 MiB) first, then prep.py (64 MiB), ...
    sites = section(page, "sites")
    order = [sites.index(html.escape(str(f))) for f in (MODEL, PREP, LOADER)]
    assert order == sorted(order)
    assert "(no Python frames recorded)" in sites  # the native allocation
    # Bytes per tag.
    row = re.search(r"<tr><td>[^\n]*?preprocess</td>(.*?)</tr>", section(page, "tags"))
    assert row and "64 MiB" in row[1]
    # The largest live allocation first.
    allocations = section(page, "allocations")
    assert allocations.index(f"{A_TORCH:#x}") < allocations.index(f"{A_PREP:#x}")
    assert "Failed allocations" in page and "80 GiB" in section(page, "failures")
    assert "Dropped events" in page and ">5<" in section(page, "summary")


def test_report_escapes_every_string(snapshot: Snapshot) -> None:
    page = _html.render_html(snapshot, title="<b>title</b>")
    assert "<script" not in page.lower(), "the page has no script, and no tag becomes one"
    assert "alert('tag')" not in page  # quotes escaped too
    assert html.escape(EVIL_TAG) in page
    assert html.escape(QUOTE_TAG) in page and '"quoted"' not in page
    assert "<evil>" not in page and html.escape(EVIL_FRAME.filename) in page
    assert "make<T>" not in page and "<Evil&Co>" not in page
    assert "<b>" not in page and "&lt;b&gt;title&lt;/b&gt;" in page
    # Still well formed, and the text reads as the original strings.
    text = "".join(check(page).text)
    assert EVIL_TAG in text and QUOTE_TAG in text and str(EVIL_FRAME) in text


def test_report_fetches_nothing(snapshot: Snapshot) -> None:
    page = _html.render_html(snapshot)
    assert "http://" not in page and "https://" not in page
    c = check(page)
    names = {name for name, _ in c.attrs}
    assert not names & {"src", "href", "xlink:href", "srcset", "action", "poster"}
    assert not re.search(r"url\(|@import|<link|<iframe|<object|<embed", page, re.IGNORECASE)


def test_report_is_deterministic(tmp_path: Path, snapshot: Snapshot, dumped: Path) -> None:
    snapshot.to_html(tmp_path / "a.html")
    Snapshot.load(dumped).to_html(tmp_path / "b.html")
    _html.write_html(make_snapshot(), tmp_path / "c.html")
    a = (tmp_path / "a.html").read_bytes()
    assert a == (tmp_path / "b.html").read_bytes() == (tmp_path / "c.html").read_bytes()
    assert a.decode("utf-8").startswith("<!DOCTYPE html>")


def test_timeline_counts_memory_live_before_recording(snapshot: Snapshot) -> None:
    device0 = [e for e in snapshot.events if e.device == 0]
    tl = _html._timeline(device0, [a for a in snapshot.allocations if a.device == 0])
    # Freed while recording, allocated before: numba and native; dropped: cupy.
    assert tl.base == {"numba": 8 * MiB, "native": 1 * MiB, "cupy": 32 * MiB}
    assert tl.values[0] == tl.base and tl.times[0] == T0
    last = tl.values[-1]
    assert {k: v for k, v in last.items() if v} == {
        "preprocess": 64 * MiB, "cuda.core": 16 * MiB, "native": 4096, "cupy": 32 * MiB,
    }  # fmt: skip
    assert sum(last.values()) == sum(a.size for a in snapshot.allocations if a.device == 0)
    # numba's 8 MiB were freed first; the rest were live together before native's free.
    assert tl.peak() == 1 * MiB + 32 * MiB + 64 * MiB + 16 * MiB
    device1 = [e for e in snapshot.events if e.device == 1]
    tl1 = _html._timeline(device1, [a for a in snapshot.allocations if a.device == 1])
    assert tl1.peak() == 256 * MiB and len(tl1.failures) == 1 and tl1.base == {}
    page = _html.render_html(snapshot)
    assert "41 MiB were live before the history starts" in page


def test_timeline_keeps_the_peak_of_a_long_history() -> None:
    events = []
    for i in range(20_000):
        size = 10 * GiB if i == 12_345 else 1000 + i % 7
        events.append(Event(T0 + 2 * i, "alloc", 0x1000 + i * 64, size, 0, 0, "t", "nbrmm"))
        events.append(Event(T0 + 2 * i + 1, "free", 0x1000 + i * 64, size, 0, 0, "t", "nbrmm"))
    tl = _html._timeline(events, [])
    times, values = _html._downsample(tl.times, tl.values)
    assert len(times) <= _html.MAX_POINTS < len(tl.times)
    assert max(sum(v.values()) for v in values) == 10 * GiB
    assert times == sorted(times) and times[-1] == tl.times[-1]
    page = _html.render_html(Snapshot(events=tuple(events)))
    check(page)
    assert "peak 10 GiB" in page and "keeping the peaks" in page
    assert len(page) < 400_000


@pytest.mark.parametrize("peak", [1, 1000, 4096, 3 * MiB + 1, 5 * GiB, 7 * 2**40 + 5])
def test_byte_axis_covers_the_peak_in_few_ticks(peak: int) -> None:
    ticks, unit, name = _html._byte_ticks(peak)
    assert ticks[0] == 0 and ticks == sorted(ticks)
    assert ticks[-1] >= peak and ticks[-2] < peak
    assert 2 <= len(ticks) <= 8
    assert name in ("B", "KiB", "MiB", "GiB", "TiB") and peak >= unit


@pytest.mark.parametrize(
    "n, text",
    [(0, "0 B"), (512, "512 B"), (1024, "1 KiB"), (1536, "1.5 KiB"), (150 * MiB, "150 MiB"),
     (3 * MiB + 1, "3 MiB"), (80 * GiB, "80 GiB"), (1023 * 1024, "1023 KiB")],
)  # fmt: skip
def test_format_bytes(n: int, text: str) -> None:
    assert _html.format_bytes(n) == text


@pytest.mark.parametrize(
    "ns, text",
    [(0, "0 ns"), (999, "999 ns"), (1000, "1 µs"), (12_345_678, "12.3 ms"),
     (1_500_000_000, "1.5 s"), (61 * 10**9, "1.02 min"), (7200 * 10**9, "2 h"),
     (-(10**9), "-1 s")],
)  # fmt: skip
def test_format_duration(ns: int, text: str) -> None:
    assert _html.format_duration(ns) == text


def test_report_of_an_empty_snapshot() -> None:
    page = _html.render_html(Snapshot())
    check(page)
    assert "No events were recorded" in page and "<svg" not in page
    assert "No live allocations." in page


# --------------------------------------------------------------------------------------
# python -m nbrmm.memory
# --------------------------------------------------------------------------------------


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nbrmm.memory", *args],
        capture_output=True, text=True, timeout=300, check=False, cwd=cwd,
    )  # fmt: skip


def test_cli_writes_the_report(tmp_path: Path, dumped: Path, snapshot: Snapshot) -> None:
    out = tmp_path / "report.html"
    result = cli(str(dumped), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout
    page = out.read_text(encoding="utf-8")
    check(page)
    assert html.escape(EVIL_TAG) in page and "snapshot.pickle" in page
    # The same page as the API's, but for the title.
    assert page == _html.render_html(snapshot, title="nbrmm memory report: snapshot.pickle")
    # Without -o: beside the snapshot.
    result = cli(str(dumped))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "snapshot.html").read_text(encoding="utf-8") == page


def test_cli_reads_a_pytorch_pickle(tmp_path: Path) -> None:
    path = tmp_path / "torch.pickle"
    path.write_bytes(pickle.dumps(torch_style_snapshot()))
    result = cli(str(path), "-o", str(tmp_path / "t.html"), "--title", "from torch")
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "t.html").read_text(encoding="utf-8")
    assert "<h1>from torch</h1>" in page and "torch" in section(page, "tags")


def test_cli_help() -> None:
    result = cli("--help")
    assert result.returncode == 0
    assert "usage: python -m nbrmm.memory" in result.stdout
    assert "--output" in result.stdout and "snapshot" in result.stdout


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "no such file"),
        ("text", "not a memory snapshot pickle"),
        ("not-a-snapshot", "no 'segments', 'device_traces' or 'nbrmm' key"),
        ("directory", "a directory, not a snapshot file"),
        ("unwritable", "cannot write"),
        ("same-file", "would replace the snapshot"),
        ("no-arguments", "the following arguments are required: snapshot"),
    ],
)
def test_cli_errors(tmp_path: Path, dumped: Path, case: str, message: str) -> None:
    args = {
        "missing": [str(tmp_path / "nope.pickle")],
        "text": [str(tmp_path / "log.csv")],
        "not-a-snapshot": [str(tmp_path / "dict.pickle")],
        "directory": [str(tmp_path)],
        "unwritable": [str(dumped), "-o", str(tmp_path / "no" / "such" / "dir.html")],
        "same-file": [str(dumped), "-o", str(dumped)],
        "no-arguments": [],
    }[case]
    (tmp_path / "log.csv").write_text("Thread,Time,Action\n")
    (tmp_path / "dict.pickle").write_bytes(pickle.dumps({"a": 1}))
    result = cli(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") <= 3
    assert dumped.read_bytes()[:1] == b"\x80", "the snapshot was left as it was"


@pytest.mark.skipif(sys.platform == "win32", reason="file names are not bytes")
def test_cli_takes_file_names_and_titles_that_are_not_utf8(tmp_path: Path, dumped: Path) -> None:
    name = os.fsdecode(b"nb\xff.pickle")
    (tmp_path / name).write_bytes(dumped.read_bytes())
    result = cli(name, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "wrote nb\\udcff.html" in result.stdout
    page = (tmp_path / os.fsdecode(b"nb\xff.html")).read_text(encoding="utf-8")
    assert "<h1>nbrmm memory report: nb\\udcff.pickle</h1>" in page
    result = cli(name, "-o", "t.html", "--title", os.fsdecode(b"t\xfe"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "<h1>t\\udcfe</h1>" in (tmp_path / "t.html").read_text(encoding="utf-8")


def test_cli_leaves_the_output_alone_when_the_snapshot_is_bad(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(pickle.dumps(_nbrmm_data([_event_dict(time_ns=10**5000)])))
    out = tmp_path / "out.html"
    out.write_text("previous report")
    result = cli(str(bad), "-o", str(out))
    assert result.returncode == 2 and "event time_ns" in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert out.read_text() == "previous report"


# --------------------------------------------------------------------------------------
# In a browser
# --------------------------------------------------------------------------------------


def run_browser(browser: str, *args: str, width: int = 1280, height: int = 900) -> str:
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [browser, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--hide-scrollbars", f"--user-data-dir={profile}",
             f"--window-size={width},{height}", "--virtual-time-budget=10000", *args],
            capture_output=True, text=True, timeout=120, check=False, env=browser_env(),
        )  # fmt: skip
    return result.stdout + "\n" + result.stderr[-2000:]


# Installed first thing in <head>: records errors and console.error calls. On load:
# measures what is wider than the window or than the page's column, and writes it all
# into the page, which --dump-dom returns.
_CAPTURE = """<script>
window.nbrmmErrors = [];
window.addEventListener("error", e => window.nbrmmErrors.push("error: " + e.message));
const nbrmmConsoleError = console.error;
console.error = (...args) => {
  window.nbrmmErrors.push("console.error: " + args.join(" "));
  nbrmmConsoleError.apply(console, args);
};
</script>"""
_MEASURE = """<script>
window.addEventListener("load", () => {
  const main = document.querySelector("main");
  const column = main ? main.getBoundingClientRect().right : window.innerWidth;
  const wide = [];
  for (const el of document.querySelectorAll("main *")) {
    const r = el.getBoundingClientRect();
    const clipped = getComputedStyle(el).overflow !== "visible"
      && el.scrollWidth > el.clientWidth + 1;
    if (r.width > 0 && (r.right > column + 1 || clipped)) {
      wide.push(el.tagName + " " + el.textContent.slice(0, 40));
    }
  }
  const charts = [...document.querySelectorAll("figure svg")].map(s => {
    const r = s.getBoundingClientRect();
    return {width: r.width, height: r.height, polygons: s.querySelectorAll("polygon").length};
  });
  const out = document.createElement("pre");
  out.id = "nbrmm-report-check";
  out.textContent = JSON.stringify({
    errors: window.nbrmmErrors,
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
    wide: wide,
    charts: charts,
    text: document.body.innerText,
  });
  document.body.appendChild(out);
});
</script>"""


def measure(browser: str, page: str, folder: Path, width: int = 1280) -> dict:
    path = folder / "checked.html"
    page = page.replace("<head>", "<head>" + _CAPTURE, 1).replace(
        "</body>", _MEASURE + "</body>", 1
    )
    path.write_text(page, encoding="utf-8")
    out = run_browser(browser, "--dump-dom", path.as_uri(), width=width)
    m = re.search(r'<pre id="nbrmm-report-check">(.*?)</pre>', out, re.DOTALL)
    assert m, f"no report from the browser: {out[-3000:]}"
    return json.loads(html.unescape(m[1]))


def test_report_renders_in_a_browser_without_errors_or_overflow(
    browser: str, tmp_path: Path, snapshot: Snapshot
) -> None:
    report = measure(browser, _html.render_html(snapshot), tmp_path)
    assert report["errors"] == []
    assert report["scrollWidth"] <= report["clientWidth"] == 1280, "horizontal scrolling"
    assert report["wide"] == [], f"wider than the page's column: {report['wide'][:5]}"
    assert len(report["charts"]) == 3
    for chart in report["charts"]:
        assert chart["width"] > 1000 and chart["height"] > 150 and chart["polygons"] > 0
    for tag in TAGS:
        assert tag in report["text"], tag
    assert "model.py:7 (forward)" in report["text"]


def test_the_browser_check_sees_errors_and_overflow(browser: str, tmp_path: Path) -> None:
    """The check above can fail: a page with an error and a too wide table is caught."""
    page = _html.render_html(make_snapshot()).replace(
        "</main>",
        '<table style="width:3000px;table-layout:auto"><tr><td>wide</td></tr></table>'
        "<script>console.error('planted'); undefinedFunction();</script></main>",
    )
    report = measure(browser, page, tmp_path)
    assert any("planted" in e for e in report["errors"])
    assert any("undefinedFunction" in e for e in report["errors"])
    assert report["scrollWidth"] > report["clientWidth"]
    assert any(w.startswith("TABLE") for w in report["wide"])


def write_screenshot(
    browser: str, page_path: Path, png: Path, width: int = 1280, height: int = 2200
) -> Path:
    """A screenshot of ``page_path`` as ``png`` (PNG), ``width`` pixels wide."""
    png.parent.mkdir(parents=True, exist_ok=True)
    if png.exists():
        png.unlink()
    out = run_browser(browser, f"--screenshot={png}", page_path.as_uri(), width=width,
                      height=height)  # fmt: skip
    assert png.exists(), f"no screenshot written: {out[-2000:]}"
    return png


def test_report_screenshot(browser: str, tmp_path: Path, snapshot: Snapshot) -> None:
    page = tmp_path / "report.html"
    snapshot.to_html(page)
    target = os.environ.get("NBRMM_MEMORY_SCREENSHOT")
    png = write_screenshot(browser, page, Path(target) if target else tmp_path / "report.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert (width, height) == (1280, 2200)
    assert len(data) > 20_000, "an almost empty picture"


def test_dataclass_fields_are_all_stored(dumped: Path, snapshot: Snapshot) -> None:
    """A field added to the snapshot's classes must be added to the file too."""
    d = raw(dumped)["nbrmm"]
    for cls, key in ((Event, "events"), (Allocation, "allocations"), (ResourceInfo, "resources")):
        assert set(d[key][0]) == {f.name for f in dataclasses.fields(cls)}, cls.__name__
