"""`process.thread_names`: a server's Python threads carry their names in the OS (what `top -H`,
py-spy and /proc show), the main thread keeps the process's name."""
import threading

from bert_tf2.process.thread_names import name_os_threads, os_name


def comm(thread) -> str:
    with open(f"/proc/self/task/{thread.native_id}/comm") as f:
        return f.read().strip()


def test_threads_take_their_python_names_but_the_main_thread_and_those_left_out():
    process_name = comm(threading.main_thread())
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait, name=name) for name in
               ("batch-7", "warm-up", "a name longer than fifteen bytes")]
    threads.append(threading.Thread(target=stop.wait))  # Python's "Thread-N (wait)"
    for thread in threads:
        thread.start()
    try:
        named = name_os_threads(but=("warm-up",))
        assert [comm(thread) for thread in threads] == [
            "batch-7", process_name, "a name longer t", "wait"]
        assert comm(threading.main_thread()) == process_name
        assert {named[t.native_id] for t in threads if t.native_id in named} == {
            "batch-7", "a name longer t", "wait"}
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def test_a_made_up_name_gives_its_target_and_long_names_are_cut_at_15_bytes():
    assert os_name(threading.Thread(target=print)) == "print"
    assert os_name(threading.Thread(name="Thread-3 (_poll_wrapper)")) == "_poll_wrapper"
    assert os_name(threading.Thread(name="épreuve-épreuve")) == "épreuve-épreu"
