"""A comparison that could not be made, as one sentence: for `assay compare`'s stderr and for
`status.comparison.error`.

A comparison can fail for the user's reasons (runs that share nothing, a missing extra), for
the data's (a results or samples file of an unexpected shape), or for the arithmetic's (a
bootstrap over extreme values that overflows). Each is one sentence without a traceback;
the exception's own text is left out, as it may quote a tenant's files.
"""

from __future__ import annotations

from assay.errors import UserError
from assay.extras import install_sentence

SACREBLEU_METRICS = "Comparing BLEU, chrF or TER"


def sentence(error: BaseException, *, runs: str) -> str:
    """Why `runs` (e.g. "The runs", "The baseline base") could not be compared, in one sentence."""
    if isinstance(error, UserError):
        return str(error)
    if isinstance(error, ModuleNotFoundError):
        if (error.name or "").partition(".")[0] == "sacrebleu":
            return install_sentence(SACREBLEU_METRICS, "metrics")
        return f"{runs} could not be compared: the module {error.name} is not installed."
    if isinstance(error, (KeyError, TypeError, ValueError, IndexError)):
        return (
            f"{runs} could not be compared: a results or samples file has an unexpected shape ({type(error).__name__})."
        )
    if isinstance(error, ArithmeticError):
        return (
            f"{runs} could not be compared: the statistics failed on extreme values ({type(error).__name__}); "
            "a score is probably infinite or huge (a -inf log-likelihood?)."
        )
    return f"{runs} could not be compared: the comparison failed ({type(error).__name__})."
