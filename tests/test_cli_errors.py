"""Bad command lines: exit code 2, one line naming the problem, no traceback."""

import pytest

from conftest import run_cli


@pytest.mark.parametrize("args, needle", [
    (["eval", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--bogus"], "--bogus"),
    (["eval", "--model", "llama-3-8b", "--gpu", "h100-sx"], "did you mean 'h100-sxm'"),
    (["eval", "--model", "lama-3-8b", "--gpu", "h100-sxm"], "did you mean 'llama-3-8b'"),
    (["eval", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--quant", "fp9"], "unknown quantization 'fp9'"),
    (["eval", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tp", "0"], "--tp"),
    (["eval", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--slo-ttft-p95", "1"], "go together"),
    (["knee", "--model", "llama-3-8b", "--context", "-5"], "--context"),
    (["train", "--params", "1e9", "--tokens", "1e12", "--gpu", "h100-sxm", "--gpus", "8", "--mfu", "40"], "--mfu"),
    (["nonsense"], "invalid choice"),
    (["eval", "--model", "llama-3-8b", "--gpu", "rtx-6000-ada"], "no BF16 TFLOPS"),
])
def test_bad_input_exit_2_one_line(args, needle):
    out, err = run_cli(*args, expect=2)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert "Traceback" not in err


def test_python_dash_m_planner_process_exits_2_one_line():
    """The real entry point (``python -m planner``) behaves as the in-process calls above."""
    from conftest import run_cli_process

    out, err = run_cli_process("nonsense", expect=2)
    assert out == "" and len(err.strip().splitlines()) == 1 and "invalid choice" in err
