"""The ground floor: how every program of the project behaves as a process. One-line refusals of
user mistakes (`errors`, `flag_ranges`), files that appear whole or not at all (`atomic_files`),
one process per output (`output_lock`), Ctrl-C and SIGTERM in one line (`interrupts`), the named
points where tests kill a run (`fault_points`) and a quiet TensorFlow start-up (`environment`).
Imports nothing of the project above it."""
