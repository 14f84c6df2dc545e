"""How a host op's module is shown: instance path with its class path."""

from __future__ import annotations

import numpy as np
import pandas as pd


def module_labels(df: pd.DataFrame) -> pd.Series:
    """Per row of host ops ``df``: ``layer2.0.conv1 (ResNet/Sequential/Bottleneck/Conv2d)``
    where the instance path is known, the class path alone where not (profiles recorded
    before instance paths, top-level modules). The index is ``df``'s."""
    if "module" not in df:
        return pd.Series([""] * len(df), index=df.index, dtype=object)
    if "module_path" not in df or not len(df):
        return df["module"].astype(object).fillna("").astype(str)
    keys = pd.MultiIndex.from_arrays(
        [
            df["module"].astype(object).fillna("").astype(str),
            df["module_path"].astype(object).fillna("").astype(str),
        ]
    )
    codes, uniques = pd.factorize(keys)
    labels = np.array([f"{path} ({cls})" if path else cls for cls, path in uniques], dtype=object)
    return pd.Series(labels[codes], index=df.index)
