"""A state machine interleaving allocation, growth, copies, close, and setting the current
resource from Python and from C++, checked against a model after every step."""

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import nbrmm
import nbrmm.mr
from helpers import HostHeap
from extensions import cpp_ext

ON_GPU = nbrmm.get_device_count() > 0


class BufferMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.heap = HostHeap()
        self.py_mr = self.heap.resource()
        cpp_ext.reset_current()
        nbrmm.mr.set_current_device_resource(self.py_mr)
        self.owner = "py"  # who set the current resource last
        self.live = {}  # id -> (buffer, expected contents or None, owner)
        self.next_id = 0
        self.cpp_base = None

    def teardown(self):
        self.live.clear()
        assert self.heap.bytes_in_use == 0
        cpp_ext.reset_current()

    # -- the current resource ---------------------------------------------------------
    @rule()
    def python_sets_current(self):
        nbrmm.mr.set_current_device_resource(self.py_mr)
        self.owner = "py"

    @rule()
    def cpp_sets_current(self):
        if self.owner != "cpp":
            cpp_ext.set_current_owned(ON_GPU)
            # A new C++ adaptor: buffers from the previous one keep it (and free into it).
            self.live = {
                k: (b, e, "cpp-old" if o == "cpp" else o) for k, (b, e, o) in self.live.items()
            }
            self.cpp_base = cpp_ext.owned_counts()[0]
        self.owner = "cpp"

    # -- buffers ----------------------------------------------------------------------
    @rule(size=st.integers(0, 4096), from_cpp=st.booleans())
    def allocate(self, size, from_cpp):
        buf = cpp_ext.allocate_from_current(size) if from_cpp else nbrmm.Buffer(size)
        if self.owner == "py":
            assert buf.mr is self.py_mr
        self.live[self.next_id] = (buf, None, self.owner)
        self.next_id += 1

    @precondition(lambda self: ON_GPU)
    @rule(data=st.binary(max_size=2048))
    def upload(self, data):
        buf = nbrmm.to_device(data)
        self.live[self.next_id] = (buf, data, self.owner)
        self.next_id += 1

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data):
        key = data.draw(st.sampled_from(sorted(self.live)))
        buf, _, _ = self.live.pop(key)
        if data.draw(st.booleans()):
            buf.close()
        del buf

    @precondition(lambda self: ON_GPU and self.live)
    @rule(data=st.data(), new_size=st.integers(0, 4096))
    def resize(self, data, new_size):
        key = data.draw(st.sampled_from(sorted(self.live)))
        buf, expected, owner = self.live[key]
        buf.resize(new_size)
        if expected is not None:
            keep = min(len(expected), new_size)
            assert buf.tobytes()[:keep] == expected[:keep]
            expected = expected[:keep] if new_size <= len(expected) else None
        self.live[key] = (buf, expected, owner)

    @precondition(lambda self: ON_GPU and self.live)
    @rule(data=st.data())
    def copy(self, data):
        key = data.draw(st.sampled_from(sorted(self.live)))
        buf, expected, owner = self.live[key]
        dup = buf.copy()
        assert dup.mr is buf.mr and dup.size == buf.size
        if expected is not None:
            assert dup.tobytes() == expected
        self.live[self.next_id] = (dup, expected, owner)
        self.next_id += 1

    # -- the model --------------------------------------------------------------------
    def _cpp_bytes(self):
        return sum(b.capacity() for b, _, o in self.live.values() if o == "cpp")

    @invariant()
    def accounting_is_exact(self):
        # Memory in use is each buffer's capacity (resize within capacity keeps it).
        py_bytes = sum(b.capacity() for b, _, o in self.live.values() if o == "py")
        assert self.heap.bytes_in_use == py_bytes
        if self.cpp_base is not None and not ON_GPU:
            assert cpp_ext.owned_counts()[0] == self.cpp_base + self._cpp_bytes()

    @invariant()
    def current_resource_matches_model(self):
        current = nbrmm.mr.get_current_device_resource()
        if self.owner == "py":
            assert current is self.py_mr and not cpp_ext.current_is_owned()
        else:
            assert cpp_ext.current_is_owned() and current is not self.py_mr

    @invariant()
    def contents_intact(self):
        if ON_GPU:
            for buf, expected, _ in self.live.values():
                if expected is not None:
                    assert buf.tobytes() == expected


BufferMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)
TestBufferMachine = BufferMachine.TestCase
