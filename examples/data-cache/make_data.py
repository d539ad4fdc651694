"""Writes examples/data-cache/transactions.csv, the small tabular dataset of the data-cache
example: ROWS rows of ``id, f0, f1, f2, f3, amount`` where ``amount`` is a fixed linear
function of the features plus a little noise (seeded, so the file is the same every time).

    python examples/data-cache/make_data.py [ROWS] [PATH]
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

WEIGHTS = (2.0, -1.0, 0.5, 3.0)
BIAS = 0.25


def rows(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    lines = ["id,f0,f1,f2,f3,amount"]
    for i in range(count):
        features = [round(rng.uniform(-1, 1), 4) for _ in WEIGHTS]
        amount = sum(w * f for w, f in zip(WEIGHTS, features, strict=True)) + BIAS
        amount += rng.gauss(0, 0.01)
        lines.append(",".join([str(i), *(str(f) for f in features), f"{amount:.4f}"]))
    return lines


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    path = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).with_name("transactions.csv")
    path.write_text("\n".join(rows(count)) + "\n")
    print(f"wrote {count} rows to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
