"""The header parser against the safetensors library itself: real files, the corrupt corpus, and fuzzing."""

from __future__ import annotations

import contextlib
import itertools
import json
import struct

import numpy as np
import pytest
import safetensors
import safetensors.numpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import TensorSpec, safe_open

from backend.agent.host.shared import safetensors_header as sh
from backend.agent.host.shared.safetensors_header import DTYPES, CheckpointError, parse_header, read_header
from backend.sandbox.fixtures import (
    CORRUPT_FILES,
    KIMI_K2_DRAFTER_BYTES,
    KIMI_K2_DRAFTER_TENSORS,
    header_bytes,
    write_corrupt_corpus,
    write_sparse_safetensors,
)

pytestmark = pytest.mark.unit


def library_accepts(buf: bytes) -> bool:
    try:
        safetensors.deserialize(buf)
    except Exception:  # the library raises SafetensorError or a pyo3 panic exception
        return False
    return True


def ours_accepts(buf: bytes) -> bool:
    try:
        parse_header(buf, len(buf), "fuzz")
    except CheckpointError:
        return False
    return True


def real_file(path) -> dict:
    """A file written by the library (numpy arrays plus a bf16 tensor through TensorSpec)."""
    arrays = {
        "w.f32": np.arange(12, dtype=np.float32).reshape(3, 4),
        "w.f16": np.ones((5,), np.float16),
        "w.f64": np.zeros((2, 2), np.float64),
        "ids": np.arange(7, dtype=np.int64),
        "mask": np.array([True, False, True]),
        "u8": np.zeros((4, 1), np.uint8),
        "i16": np.zeros((3,), np.int16),
        "c64": np.zeros((2,), np.complex64),
        "empty": np.zeros((0, 3), np.float32),
    }
    safetensors.numpy.save_file(arrays, str(path), metadata={"format": "pt"})
    return arrays


def test_real_file_round_trip(tmp_path):
    path = tmp_path / "real.safetensors"
    arrays = real_file(path)
    header = read_header(str(path))
    assert header["metadata"] == {"format": "pt"}
    with safe_open(str(path), "np") as f:
        assert sorted(f.keys()) == sorted(header["tensors"]) == sorted(arrays)
        for name in f.keys():  # noqa: SIM118  (safe_open is not a mapping)
            tensor = header["tensors"][name]
            assert tensor["shape"] == list(f.get_slice(name).get_shape())
            assert tensor["bytes"] == arrays[name].nbytes
            np.testing.assert_array_equal(f.get_tensor(name), arrays[name])
    # The data spans tile the data region exactly, in the file's order.
    spans = [t["data_offsets"] for t in header["tensors"].values()]
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert 8 + header["header_len"] + spans[-1][1] == path.stat().st_size


def test_bf16_written_by_the_library(tmp_path):
    data = np.arange(6, dtype=np.uint16)
    spec = TensorSpec(dtype="bfloat16", shape=[2, 3], data_ptr=data.ctypes.data, data_len=data.nbytes)
    buf = safetensors.serialize({"w": spec}, None)
    assert parse_header(buf, len(buf), "bf16")["tensors"]["w"] == {
        "dtype": "BF16",
        "shape": [2, 3],
        "bytes": 12,
        "data_offsets": [0, 12],
    }


def test_sparse_writer_lays_out_the_header_like_the_library(tmp_path):
    """Same tensors, same metadata: our header bytes equal the library's (order by dtype desc, then name)."""
    arrays = {
        "b": np.zeros((2, 2), np.float32),
        "a": np.zeros(3, np.int8),
        "c": np.zeros(2, np.float64),
        "a2": np.zeros(2, np.float32),
        "z": np.zeros(5, np.bool_),
    }
    buf = safetensors.numpy.save(arrays, metadata={"format": "pt"})
    codes = {"float32": "F32", "int8": "I8", "float64": "F64", "bool": "BOOL"}
    layout = {name: (codes[str(a.dtype)], list(a.shape)) for name, a in arrays.items()}
    head, data_len = header_bytes(layout, {"format": "pt"})
    assert buf[: len(head)] == head
    assert len(buf) == len(head) + data_len


def test_dtype_bit_widths_match_the_library():
    """For every dtype: the exact span loads in the library and in ours, one byte more loads in neither."""
    for dtype, bits in DTYPES.items():
        for extra, accepted in ((0, True), (1, False)):
            size = 8 * bits // 8 + extra
            head = json.dumps({"x": {"dtype": dtype, "shape": [8], "data_offsets": [0, size]}}).encode()
            buf = struct.pack("<Q", len(head)) + head + bytes(size)
            assert library_accepts(buf) is accepted, dtype
            assert ours_accepts(buf) is accepted, dtype
    # Sub-byte dtypes must fill whole bytes.
    head = json.dumps({"x": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}).encode()
    buf = struct.pack("<Q", len(head)) + head + bytes(2)
    assert not library_accepts(buf) and not ours_accepts(buf)


def test_corrupt_corpus(tmp_path):
    for path, rule in write_corrupt_corpus(str(tmp_path)).items():
        with pytest.raises(CheckpointError) as err:
            read_header(path)
        assert err.value.rule == rule, path
        assert err.value.path == path
        message = str(err.value)
        assert message.startswith(path + ": ") and message.endswith("re-download or re-save the file.")
        assert "\n" not in message
        with open(path, "rb") as f:
            assert not library_accepts(f.read()), path
    assert len(CORRUPT_FILES) >= 15


def test_read_header_reads_only_the_header(tmp_path, monkeypatch):
    """A 2.2 GiB Kimi-K2 drafter: exactly 8 + N bytes are read, whatever the data size."""
    path = str(tmp_path / "model.safetensors")
    write_sparse_safetensors(path, KIMI_K2_DRAFTER_TENSORS, {"format": "pt"})
    read_sizes = []

    class Counting:
        def __init__(self, f):
            self.f = f

        def read(self, n):
            data = self.f.read(n)
            read_sizes.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(sh, "open", lambda p, mode: Counting(open(p, mode)), raising=False)
    header = read_header(path)
    assert sum(read_sizes) == 8 + header["header_len"] < 4096
    assert sum(t["bytes"] for t in header["tensors"].values()) == KIMI_K2_DRAFTER_BYTES


def test_a_bogus_length_is_never_read(tmp_path):
    path = tmp_path / "claims.safetensors"
    path.write_bytes(struct.pack("<Q", 99_000_000) + b"{}")
    with pytest.raises(CheckpointError) as err:
        read_header(str(path))
    assert err.value.rule == "header_length"


@pytest.mark.parametrize(
    ("header", "rule"),
    [
        (b'{"__metadata__": {"a": "1"}, "__metadata__": {"a": "2"}}', "metadata"),
        (b'{"x": {"dtype": "F32", "dtype": "F32", "shape": [], "data_offsets": [0, 4]}}', "entry"),
        (b'{"x\\ud800": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}', "entry"),
        (b'{"x": {"dtype": "F32", "shape": [true], "data_offsets": [0, 4]}}', "shape"),
        (b'{"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}', "contiguous"),
        (b'{"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 18446744073709551616]}}', "offsets"),
        (b"[" * 5000 + b"]" * 5000, "json"),
    ],
)
def test_edge_cases_agree_with_the_library(header, rule):
    buf = struct.pack("<Q", len(header)) + header + bytes(4)
    with pytest.raises(CheckpointError) as err:
        parse_header(buf, len(buf), "edge")
    assert err.value.rule == rule
    assert not library_accepts(buf)


@pytest.mark.parametrize(
    "header",
    [
        b'{"__metadata__": null, "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
        b'  {"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": [1, 2]}}   ',
        b'{"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "x": {"dtype": "F32", "shape": [1], '
        b'"data_offsets": [0, 4]}}',
        b'{"z": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}, "x": {"dtype": "F32", "shape": [1], '
        b'"data_offsets": [0, 4]}}',
    ],
)
def test_odd_but_valid_headers_are_accepted_like_the_library(header):
    buf = struct.pack("<Q", len(header)) + header + bytes(4)
    assert library_accepts(buf)
    assert ours_accepts(buf)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=1 << 70))
def test_fuzz_bytes_only_ever_raise_checkpoint_error(raw, file_size):
    with contextlib.suppress(CheckpointError):
        parse_header(raw, file_size, "fuzz")


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200).map(lambda b: struct.pack("<Q", len(b)) + b))
def test_fuzz_framed_garbage(buf):
    with contextlib.suppress(CheckpointError):
        parse_header(buf, len(buf), "fuzz")


_json_scalar = st.one_of(
    st.integers(min_value=-3, max_value=(1 << 64) + 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
)
_dtype = st.one_of(st.sampled_from(sorted(DTYPES)), st.text(max_size=5))
_dim = st.one_of(st.integers(min_value=0, max_value=6), _json_scalar)
_entry = st.fixed_dictionaries(
    {
        "dtype": _dtype,
        "shape": st.one_of(st.lists(_dim, max_size=3), _json_scalar),
        "data_offsets": st.one_of(st.lists(st.integers(min_value=-1, max_value=64), min_size=0, max_size=3)),
    }
)
_header = st.dictionaries(
    st.one_of(st.text(max_size=6), st.just("__metadata__")),
    st.one_of(_entry, _json_scalar, st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)),
    max_size=4,
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_header, st.integers(min_value=0, max_value=80), st.integers(min_value=0, max_value=3))
@pytest.mark.slow
def test_fuzz_structured_headers_agree_with_the_library(header, data_len, pad):
    """Near-valid headers: we accept exactly the files the safetensors library accepts."""
    text = json.dumps(header).encode() + b" " * pad
    buf = struct.pack("<Q", len(text)) + text + bytes(data_len)
    assert ours_accepts(buf) == library_accepts(buf), buf[:300]


@settings(max_examples=500, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.tuples(st.sampled_from(sorted(DTYPES)), st.lists(st.integers(min_value=0, max_value=5), max_size=3)),
        max_size=5,
    ),
    st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
)
@pytest.mark.slow
def test_fuzz_valid_layouts_parse_back(tensors, metadata):
    """Every layout header_bytes writes (when whole bytes) is accepted by both, with the same tensors back."""
    sizes = {n: DTYPES[d] * int(np.prod(s, dtype=object)) for n, (d, s) in tensors.items()}
    if any(bits % 8 for bits in sizes.values()):
        return
    head, data_len = header_bytes(tensors, metadata)
    buf = head + bytes(data_len)
    assert library_accepts(buf)
    parsed = parse_header(buf, len(buf), "layout")
    assert parsed["metadata"] == metadata
    assert {n: (t["dtype"], t["shape"]) for n, t in parsed["tensors"].items()} == {
        n: (d, list(s)) for n, (d, s) in tensors.items()
    }
