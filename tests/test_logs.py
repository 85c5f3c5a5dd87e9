"""The logs of the URL clients, cleaned of credentials (streamseq._logs)."""

import contextlib
import io
import logging

from streamseq._logs import hide_in_logs

URL = "https://me:pa55word@host/a.bin?X-Amz-Signature=t0ken"


def _logged(name, message, *args):
    """What a handler on the root logger shows (stderr too) of one record on ``name``."""
    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(out)
    root = logging.getLogger()
    saved, root.handlers = root.handlers, [handler]  # (pytest's own raise on a misfit)
    try:
        with contextlib.redirect_stderr(err):
            logging.getLogger(name).warning(message, *args)
    finally:
        root.handlers = saved
    return out.getvalue() + err.getvalue()


def test_a_logger_made_after_the_secrets_were_given():
    hide_in_logs({"pa55word", "t0ken"})
    text = _logged("fsspec.made_later_for_a_test", "get %s", URL)
    assert "***@host" in text
    assert "pa55word" not in text and "t0ken" not in text


def test_a_record_whose_arguments_do_not_fit_its_message():
    """logging prints such a record's message and arguments to stderr: hidden there too."""
    hide_in_logs({"pa55word", "t0ken"})
    logging.getLogger("fsspec.misfit_for_a_test")  # (made before the secrets are given)
    hide_in_logs({"pa55word"})
    for args in [(URL,), (URL, URL, URL), ({"url": URL},)]:
        text = _logged("fsspec.misfit_for_a_test", "get %s %s", *args)
        assert "pa55word" not in text and "t0ken" not in text, text


def test_the_filter_stays_when_logging_is_configured_again():
    import logging.config

    hide_in_logs({"pa55word", "t0ken"})
    logging.getLogger("fsspec.configured_for_a_test")
    saved = logging.getLogger().handlers[:]
    try:
        logging.config.dictConfig(
            {
                "version": 1,
                "disable_existing_loggers": False,
                "loggers": {"fsspec": {"level": "DEBUG"}},
            }
        )
        text = _logged("fsspec.configured_for_a_test", "get %s", URL)
    finally:
        logging.getLogger().handlers[:] = saved
        logging.getLogger("fsspec").setLevel(logging.NOTSET)
    assert "***@host" in text and "pa55word" not in text
