"""`SettingsError`: a run asked for something it cannot do (a missing file or flag, a setting the
model or the output folder does not fit). The runners print it as a usage error."""


class SettingsError(ValueError):
    """Settings that cannot work; the message says which and what to do."""
