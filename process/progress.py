"""How long-running programs (training, batch jobs) say how long is left: in progress lines that
people read, as `1m20s` or `2h05m`."""


def format_duration(seconds: float) -> str:
    """`1m20s`, `2h05m`: the time left, in the progress lines of training and batch jobs."""
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s"
