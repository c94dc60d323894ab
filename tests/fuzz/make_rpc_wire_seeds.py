#!/usr/bin/python3
"""Writes the seed corpus of fuzz_rpc_wire (tests/fuzz/corpus/rpc_wire/): for every message
type of its wire_types table, valid messages with every field set to a realistic value, one
with only the required ids, and the same bytes cut into slices of a few sizes.

Each seed is: the type's index in wire_types (tests/fuzz/fuzz_rpc_wire.c, same order as
TYPES below), the slice size byte (0: one slice), the encoded message.

    /usr/bin/python3 tests/fuzz/make_rpc_wire_seeds.py BUILD_DIR   # BUILD_DIR/python: protoc's

Owns: tests/fuzz/corpus/rpc_wire/ (rewritten whole). Reads the main build's Python protos."""
import hashlib
import os
import shutil
import sys

sys.path.insert(0, os.path.join(sys.argv[1], 'python'))
from compute.v1 import compute_pb2 as c  # noqa: E402
from nodeagent.v1 import nodeagent_pb2 as n  # noqa: E402
from google.protobuf import descriptor as d  # noqa: E402

TYPES = [
    c.CreateSandboxRequest, c.DescribeSandboxRequest, c.DestroySandboxRequest,
    c.ExecCommandRequest, c.ReadFileRequest, c.WriteFileRequest, c.ListFilesRequest,
    n.GetAgentInfoRequest, n.CreateSandboxRequest, n.DestroySandboxRequest,
    n.GetSandboxRequest, n.ListSandboxesRequest, n.ExecRequest, n.ReadFileRequest,
    n.WriteFileRequest, n.ListFilesRequest, n.GetUsageRequest,
    n.GetAgentInfoResponse, n.CreateSandboxResponse, n.DestroySandboxResponse,
    n.GetSandboxResponse, n.ListSandboxesResponse,
    c.ExecEvent, c.ReadFileResponse, c.WriteFileResponse, c.ListFilesResponse,
    n.GetUsageResponse, c.ListSandboxesRequest,
]

UUID = '3f2a9c1e-7b4d-4e8a-9c0f-1d2e3f4a5b6c'
STRINGS = {
    'path': 'src/main.py', 'mount_path': '/workspace', 'image': 'debian:bookworm-compute',
    'command': 'python3', 'working_dir': '/workspace/src', 'storage_class': 'standard',
    'size': '5Gi', 'namespace': 'compute-sandboxes', 'name': 'sbx-3f2a9c1e',
    'pod_name': 'sbx-3f2a9c1e', 'container': 'sandbox', 'node_name': 'node-1',
    'version': '0.1.0', 'page_token': 'c2J4LTNm', 'next_page_token': 'c2J4LTQw',
    'message': 'exit status 1', 'error': 'no such file',
}
BYTES = b'print("hello")\n\x00\xff\xfe binary tail'


def fill(msg, depth=0):
    """Sets every field of msg to a plausible value (one of each oneof: the first)."""
    for f in msg.DESCRIPTOR.fields:
        if f.containing_oneof and f.containing_oneof.fields[0] is not f:
            continue
        repeated = f.label == d.FieldDescriptor.LABEL_REPEATED
        if f.message_type and f.message_type.GetOptions().map_entry:
            getattr(msg, f.name).update({'LANG': 'C.UTF-8', 'HOME': '/workspace'})
        elif f.message_type:
            if depth > 4:
                continue
            for _ in range(2 if repeated else 1):
                sub = getattr(msg, f.name).add() if repeated else getattr(msg, f.name)
                if f.message_type.full_name == 'google.protobuf.Timestamp':
                    sub.seconds, sub.nanos = 1796300000, 123456789
                elif f.message_type.full_name == 'google.protobuf.Duration':
                    sub.seconds = 900
                else:
                    fill(sub, depth + 1)
        else:
            v = value(f)
            if repeated:
                getattr(msg, f.name).extend([v, v] if f.type != f.TYPE_STRING else ['-c', 'print(1)'])
            else:
                setattr(msg, f.name, v)
    return msg


def value(f):
    if f.type == f.TYPE_STRING:
        return UUID if f.name.endswith('_id') or f.name == 'uid' else STRINGS.get(f.name, f.name)
    if f.type == f.TYPE_BYTES:
        return BYTES
    if f.type == f.TYPE_BOOL:
        return True
    if f.type == f.TYPE_ENUM:
        return f.enum_type.values[-1].number
    if f.type in (f.TYPE_DOUBLE, f.TYPE_FLOAT):
        return 0.25
    if f.type in (f.TYPE_INT32, f.TYPE_SINT32, f.TYPE_SFIXED32):
        return -2
    if f.type in (f.TYPE_UINT32, f.TYPE_FIXED32):
        return 1000
    return 268435456


def ids_only(msg):
    for f in msg.DESCRIPTOR.fields:
        if f.type == f.TYPE_STRING and f.name.endswith('_id') and f.label != f.LABEL_REPEATED:
            setattr(msg, f.name, UUID)
    return msg


def key(msg_type, field, wire):
    return varint(msg_type.DESCRIPTOR.fields_by_name[field].number << 3 | wire)


def varint(v):
    out = b''
    while v >= 0x80:
        out += bytes([v & 0x7f | 0x80])
        v >>= 7
    return out + bytes([v])


def ld(msg_type, field, data):
    return key(msg_type, field, 2) + varint(len(data)) + data


def edge_seeds():
    """Hand-written encodings the reader must get right (or refuse)."""
    w = TYPES.index(c.WriteFileRequest)
    wd = ld(c.WriteFileRequest, 'sandbox_id', UUID.encode())
    return {
        # The bulk field twice (the last one wins) around another field, in 5-byte slices.
        'edge_write_data_twice': bytes([w, 5]) + ld(c.WriteFileRequest, 'data', b'old') + wd
        + ld(c.WriteFileRequest, 'path', b'out.txt') + ld(c.WriteFileRequest, 'data', b'new!'),
        # A NUL inside a string: refused.
        'edge_nul_in_path': bytes([w, 0]) + wd + ld(c.WriteFileRequest, 'path', b'a\0/../x'),
        # A field numbered 0 written in two bytes (80 00): refused (protobuf-c took it).
        'edge_field_zero': bytes([TYPES.index(c.DescribeSandboxRequest), 0, 0x80, 0, 0]),
        # Unknown fields of every wire type, a non-minimal varint, a truncated length.
        'edge_unknown_fields': bytes([TYPES.index(c.DescribeSandboxRequest), 0])
        + ld(c.DescribeSandboxRequest, 'sandbox_id', UUID.encode()) + varint(99 << 3)
        + b'\x81\x80\x80\x00' + varint(100 << 3 | 1) + b'12345678' + varint(101 << 3 | 5)
        + b'1234' + varint(102 << 3 | 2) + b'\x02ab',
        'edge_truncated': bytes([w, 0]) + wd + key(c.WriteFileRequest, 'data', 2) + b'\x90\x4e',
        # protobuf-c drops the bits of a value past the 64th: both readers accept it (they did
        # not agree before); a length over 2^31 is refused by both.
        'edge_varint_over_64_bits': bytes([TYPES.index(c.ReadFileResponse), 0, 0x40, 0x40, 0x40])
        + b'\xf5' * 9 + b'\x32',
        'edge_length_over_31_bits': bytes([w, 0]) + wd + key(c.WriteFileRequest, 'path', 2)
        + b'\x80\x80\x80\x80\x10' + ld(c.WriteFileRequest, 'data', b'x'),
    }


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'corpus', 'rpc_wire')
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    seeds = {}
    for i, t in enumerate(TYPES):
        full = fill(t()).SerializeToString()
        seeds[bytes([i, 0]) + full] = f'{i:02d}_{t.DESCRIPTOR.name}_full'
        seeds[bytes([i, 0]) + ids_only(t()).SerializeToString()] = f'{i:02d}_{t.DESCRIPTOR.name}_ids'
        if t in (c.WriteFileRequest, n.WriteFileRequest, c.ReadFileResponse, c.ExecCommandRequest):
            for chunk in (1, 3, 16):
                seeds[bytes([i, chunk]) + full] = f'{i:02d}_{t.DESCRIPTOR.name}_slices{chunk}'
    for name, data in edge_seeds().items():
        seeds[data] = name
    for data, name in seeds.items():
        with open(os.path.join(out, name), 'wb') as fh:
            fh.write(data)
    print(f'{len(seeds)} seeds in {out} ({sum(map(len, seeds))} bytes);'
          f' sha1 of all: {hashlib.sha1(b"".join(sorted(seeds))).hexdigest()[:12]}')


if __name__ == '__main__':
    main()
