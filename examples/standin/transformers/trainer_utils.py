"""Stand-in for transformers.trainer_utils.get_last_checkpoint."""

import os
import re


def get_last_checkpoint(folder):
    found = [
        (int(m.group(1)), name)
        for name in os.listdir(folder)
        if (m := re.fullmatch(r"checkpoint-(\d+)", name))
        and os.path.isdir(os.path.join(folder, name))
    ]
    return os.path.join(folder, max(found)[1]) if found else None
