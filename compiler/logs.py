"""What a command prints on stderr: our loggers at INFO (DEBUG with -v), third parties' warnings and logs only with
-v. The console script and the program-stage worker process (stage_worker.py) both set it up this way."""

from __future__ import annotations

import logging
import os
import sys
import warnings

OUR_LOGGERS = ("ditskip_edge", "export", "compiler")
THIRD_PARTY_LOGGERS = ("diffusers", "transformers", "torch", "torchao", "peft", "executorch", "onnxruntime", "httpx",
                       "urllib3", "sentence_transformers", "root")


def quiet_third_parties(verbose: bool) -> None:
    """Before the libraries are imported: their warnings (torchao, transformers, ...) only with -v."""
    if verbose:
        return
    warnings.filterwarnings("ignore")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")          # transformers' "Loading weights" bars
    import torch  # noqa: F401  (torch configures its loggers when imported: set their level after that)
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def configure_logging(our_level: int, root_level: int = logging.WARNING) -> None:
    """Log records to stderr, one line each; ours from `our_level`, everyone else's from `root_level`."""
    logging.basicConfig(level=root_level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    for ours in OUR_LOGGERS:
        logging.getLogger(ours).setLevel(our_level)
