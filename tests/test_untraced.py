"""The ``untraced`` marker (tests/conftest.py): a marked module, and every module of UNTRACED_FOLDERS, runs with
coverage's trace function set aside, in the threads it starts too; the function is put back afterwards."""
import sys
import threading

import pytest

from tests.conftest import UNTRACED_FOLDERS, untraced

pytestmark = pytest.mark.untraced


def test_a_marked_module_runs_without_a_trace_function_and_so_do_its_threads():
    in_thread = []
    thread = threading.Thread(target=lambda: in_thread.append(sys.gettrace()))
    thread.start()
    thread.join()
    assert (sys.gettrace(), threading.gettrace(), in_thread) == (None, None, [None])


def test_untraced_sets_the_trace_function_aside_and_puts_it_back():
    def tracer(frame, event, arg):
        return None

    saved = sys.gettrace(), threading.gettrace()
    sys.settrace(tracer)
    threading.settrace(tracer)
    try:
        with untraced():
            assert (sys.gettrace(), threading.gettrace()) == (None, None)
        assert (sys.gettrace(), threading.gettrace()) == (tracer, tracer)
    finally:
        sys.settrace(saved[0])
        threading.settrace(saved[1])


def test_the_modules_of_the_untraced_folders_carry_the_marker(request):
    in_folders = [item for item in request.session.items
                  if any(item.path.is_relative_to(folder) for folder in UNTRACED_FOLDERS)]
    if not in_folders:
        pytest.skip("no test of an untraced folder was collected in this run")
    assert [item.nodeid for item in in_folders if item.get_closest_marker("untraced") is None] == []
