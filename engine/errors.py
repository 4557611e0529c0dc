"""`SettingsError`: a run asked for something it cannot do (a missing file or flag, a setting the
model or the output folder does not fit). Programs print it as one line with exit status 2, as a
bad flag (`modeling.errors`)."""
from modeling.errors import USAGE_STATUS, UserError


class SettingsError(UserError):
    """Settings that cannot work; the message says which and what to do."""

    exit_status = USAGE_STATUS
