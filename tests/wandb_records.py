"""Read an offline wandb run file (``run-<id>.wandb``) with wandb's own protobuf records.

The file is a LevelDB-style log (7-byte file header, then 32 KiB blocks of
records with a 7-byte header each); each payload is a
``wandb.proto.wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[wandb_internal_pb2.Record]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a wandb run file"
    out, pos, pending = [], HEADER, b""
    while pos + HEADER <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < HEADER:
            pos += left_in_block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        payload = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == 0 and length == 0:
            pos += BLOCK - pos % BLOCK if pos % BLOCK else 0
            continue
        if kind in (FULL, FIRST):
            pending = payload
        else:
            pending += payload
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def history(path: Path) -> list[dict]:
    """Every ``wandb.log`` row of the run, as {key: value}."""
    rows = []
    for record in records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows


def run_record(path: Path):
    for record in records(path):
        if record.WhichOneof("record_type") == "run":
            return record.run
    return None


def summary(path: Path) -> dict:
    """The run summary (``run.summary.update``), last value per key."""
    out: dict = {}
    for record in records(path):
        if record.WhichOneof("record_type") == "summary":
            for item in record.summary.update:
                out[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return out


def media(path: Path) -> dict[str, str]:
    """Every logged table or image of the run: {key: wandb type}, e.g. {"eval/methods": "table-file"}."""
    return {
        key[: -len("/_type")]: value for row in history(path) for key, value in row.items() if key.endswith("/_type")
    }
