"""Loud warnings for a vocabulary that does not fit the casing or the text, before training starts.

Nothing fails when the vocabulary is wrong: a cased vocabulary with lower-casing never matches its
capitalised entries, an uncased one without lower-casing turns every capitalised word into `[UNK]`,
and a wrong file (another model's, a SentencePiece list) maps nearly everything to `[UNK]`, so a
model trains on noise without any error. These checks make the mistake visible.
"""
import re
import warnings

# Judged on the entries with a cased letter ("##" stripped, "[...]" specials skipped).
CASED_VOCAB_MIN_CAPITALISED = 0.01  # above this share of capitalised entries a vocab is cased
UNCASED_VOCAB_MAX_CAPITALISED = 0.001  # below it, uncased; in between no verdict
MIN_ENTRIES_TO_JUDGE = 100  # a smaller vocabulary (a test fixture) gets no casing verdict
# Measured on the 4.7M tokens of the shared data: 0.0014% [UNK] with the uncased vocab and
# lower-casing, 0.025% with a cased vocab learned from 2.5 MB of it; 11.2% (7.4% to 19.5% per
# source) with the uncased vocab and no lower-casing; a wrong file gives up to 100%. (A cased vocab
# with lower-casing keeps [UNK] low; the casing check above catches that one.)
UNK_SHARE_THRESHOLD = 0.05
MIN_TOKENS_TO_JUDGE = 100


class VocabularyWarning(UserWarning):
    """The vocabulary does not fit the casing or the text; escalate with `warnings.simplefilter`."""


def capitalised_share(tokens) -> tuple:
    """`(share, judged)`: of the entries with a cased letter, the share with a capital in them."""
    judged = capitalised = 0
    for token in tokens:
        if token.startswith("[") and token.endswith("]"):
            continue
        word = token[2:] if token.startswith("##") else token
        if word.lower() == word.upper():
            continue  # digits, punctuation, CJK: no case to judge
        judged += 1
        capitalised += word != word.lower()
    return (capitalised / judged if judged else 0.0), judged


def warn_if_casing_mismatch(tokens, do_lower_case: bool, source: str = "the vocabulary") -> None:
    """Warns when `do_lower_case` disagrees with the casing the vocabulary entries show."""
    share, judged = capitalised_share(tokens)
    if judged < MIN_ENTRIES_TO_JUDGE:
        return
    if do_lower_case and share > CASED_VOCAB_MIN_CAPITALISED:
        warnings.warn(
            f"{source} looks CASED ({share:.1%} of its entries have capitals) but do_lower_case "
            "is True: its capitalised entries can never match. Pass do_lower_case=False if the "
            "model was trained cased.", VocabularyWarning, stacklevel=3)
    elif not do_lower_case and share < UNCASED_VOCAB_MAX_CAPITALISED:
        warnings.warn(
            f"{source} looks UNCASED ({share:.2%} of its entries have capitals) but "
            "do_lower_case is False: capitalised words will become [UNK] or odd pieces. Pass "
            "do_lower_case=True if the model was trained uncased.", VocabularyWarning,
            stacklevel=3)


def check_unk_share(num_unk: int, num_tokens: int) -> float:
    """The `[UNK]` share of a sample; warns loudly above `UNK_SHARE_THRESHOLD`."""
    share = num_unk / num_tokens if num_tokens else 0.0
    if num_tokens >= MIN_TOKENS_TO_JUDGE and share > UNK_SHARE_THRESHOLD:
        warnings.warn(
            f"[UNK] IS {share:.1%} OF {num_tokens} TOKENS (normal is well under 1%; warning "
            f"above {UNK_SHARE_THRESHOLD:.0%}): wrong vocab file or wrong do_lower_case? A model "
            "fed this learns next to nothing.", VocabularyWarning, stacklevel=3)
    return share


def validate_case_matches_checkpoint(do_lower_case: bool, init_checkpoint: str) -> None:
    """The original's check: raises when a released checkpoint's name contradicts the casing."""
    if not init_checkpoint:
        return
    m = re.match("^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
    if m is None:
        return
    model_name = m.group(1)
    lower_models = ["uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
                    "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12"]
    cased_models = ["cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16",
                    "multi_cased_L-12_H-768_A-12"]
    if model_name in lower_models and not do_lower_case:
        actual, case_name, opposite = "False", "lowercased", "True"
    elif model_name in cased_models and do_lower_case:
        actual, case_name, opposite = "True", "cased", "False"
    else:
        return
    raise ValueError(
        f"You passed in `--do_lower_case={actual}` with `--init_checkpoint={init_checkpoint}`. "
        f"However, `{model_name}` seems to be a {case_name} model, so you should pass in "
        f"`--do_lower_case={opposite}` so that the fine-tuning matches how the model was "
        "pre-training.")
