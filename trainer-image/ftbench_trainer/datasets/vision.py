"""Vision datasets: Parquet files as ado writes them, one JPEG and one chat per row.

The layout (columns ``images`` and ``output``, the features metadata Hugging Face ``datasets``
reads) is described in the package docstring; here are the picture and the writer.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

from ftbench_trainer.datasets.errors import DatasetError
from ftbench_trainer.datasets.words import seeded_rng, words

#: Words of a vision row's question (ado: 50 tokens x 0.75 words per token).
VISION_QUESTION_WORDS = 38


#: Fixed JPEG settings (Pillow's defaults, spelled out) so the bytes depend only on (width, height,
#: seed) and the Pillow build, never on a changed default.
JPEG_QUALITY = 75
JPEG_SUBSAMPLING = 2  # 4:2:0
#: The outer circle's radius as a fraction of the shorter side; the inner one has half of it.
OUTER_RADIUS = 0.45


def make_jpeg(width: int, height: int, seed: int = 0) -> bytes:
    """The vision rows' image: a white RGB canvas with two concentric filled circles in colours
    drawn from ``seed``, JPEG-encoded.

    ado's generator stores the same kind of picture as JPEG (one per row), so a vision processor
    decodes the same format at the same size in both tools; the drawing and its geometry are
    ftbench's own. Deterministic for a given Pillow build (no metadata, fixed encoder settings).
    """
    try:
        from PIL import Image, ImageDraw
    except ImportError as e:  # pragma: no cover - pillow is in the trainer extra and the fms locks
        raise DatasetError("vision datasets need pillow (install the trainer extra)") from e
    if width < 1 or height < 1:
        raise DatasetError(f"image size must be positive, got {width}x{height}")
    rng = seeded_rng("image", width, height, seed)
    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    pen = ImageDraw.Draw(canvas)
    centre_x, centre_y = width / 2, height / 2
    radius = OUTER_RADIUS * min(width, height)
    for r in (radius, radius / 2):  # outer first, so the inner circle is drawn over it
        colour = (rng.randrange(200), rng.randrange(200), rng.randrange(200))  # never near-white
        pen.ellipse((centre_x - r, centre_y - r, centre_x + r, centre_y + r), fill=colour)
    out = io.BytesIO()
    canvas.save(out, format="JPEG", quality=JPEG_QUALITY, subsampling=JPEG_SUBSAMPLING, optimize=False)
    return out.getvalue()


# ado's columns: `images` one {bytes, path} image per row; `output` the chat, each content part
# a {type, text, index} struct (text parts index null, the image part the row number).
_PART = {"type": {"dtype": "string", "_type": "Value"}, "text": {"dtype": "string", "_type": "Value"},
         "index": {"dtype": "int64", "_type": "Value"}}  # fmt: skip
_VISION_FEATURES = {
    "info": {
        "features": {
            "images": {"_type": "Image"},
            "output": {
                "feature": {
                    "role": {"dtype": "string", "_type": "Value"},
                    "content": {"feature": _PART, "_type": "List"},
                },
                "_type": "List",
            },
        }
    }
}


def vision_chat(rng: random.Random, row: int, min_words: int) -> list[dict]:
    question = " ".join(words(rng, VISION_QUESTION_WORDS))
    answer = " ".join(words(rng, min_words))
    return [
        {"role": "user", "content": [{"type": "text", "text": question, "index": None},
                                     {"type": "image", "text": None, "index": row}]},
        {"role": "assistant", "content": [{"type": "text", "text": answer, "index": None}]},
    ]  # fmt: skip


def write_vision(dataset_id: str, params: dict, seed: int, path: Path) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:  # pragma: no cover - pyarrow comes with `datasets`
        raise DatasetError("vision datasets need pyarrow (install the trainer extra)") from e

    part = pa.struct([("type", pa.string()), ("text", pa.string()), ("index", pa.int64())])
    schema = pa.schema(
        [
            ("images", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            ("output", pa.list_(pa.struct([("role", pa.string()), ("content", pa.list_(part))]))),
        ],
        metadata={"huggingface": json.dumps(_VISION_FEATURES)},
    )
    image = {"bytes": make_jpeg(params["width"], params["height"], seed), "path": None}
    batch_rows = 64
    n = 0
    with pq.ParquetWriter(path, schema, compression="zstd", use_dictionary=True) as writer:
        for start in range(0, params["entries"], batch_rows):
            rows = range(start, min(start + batch_rows, params["entries"]))
            chats = [vision_chat(seeded_rng(dataset_id, seed, i), i, params["min_tokens"]) for i in rows]
            table = pa.table({"images": [image] * len(chats), "output": chats}, schema=schema)
            writer.write_table(table, row_group_size=batch_rows)
            n += len(chats)
    return n
