"""The explorer in a real browser: headless Chromium (Debian's chromium + chromium-driver) driven by
selenium. The live page is the server of ``gradlab explore``'s own help example; a slider handle is
moved with the keyboard, and the maps the page then holds (its Bokeh document's data sources) must
equal gradlab.simulate's, computed here. The static page (the docs' home page) likewise."""

import math
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER),
                                reason="no Chromium here (apt-get install chromium chromium-driver)")

import gradlab  # noqa: E402
from gradlab import simulate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: The image a data source holds, flattened, with its shape (null while the page is loading).
IMAGE = """
for (const doc of (window.Bokeh && Bokeh.documents) || []) {
  const source = doc.get_model_by_name(arguments[0]);
  if (source) { const im = source.data.image[0]; return {shape: Array.from(im.shape), values: Array.from(im)}; }
}
return null;
"""
#: The noUiSlider handle of the slider whose title starts with arguments[0] (inside Bokeh's shadow DOM).
HANDLE = """
const title = arguments[0];
function find(views) {
  for (const v of views) {
    if (v.model.title !== undefined && String(v.model.title).startsWith(title)) return v;
    const child = find(v.child_views ? [...v.child_views] : []);
    if (child) return child;
  }
  return null;
}
const view = find([...Bokeh.index.roots]);
return view ? view.shadow_el.querySelector('.noUi-handle') : null;
"""
#: The value of the slider whose title starts with arguments[0].
VALUE = """
for (const doc of Bokeh.documents) for (const m of doc.all_models)
  if (m.title !== undefined && m.start !== undefined && String(m.title).startsWith(arguments[0])) return m.value;
return null;
"""


def _image(driver, name):
    got = driver.execute_script(IMAGE, name)
    return None if got is None else np.asarray(got["values"], float).reshape(got["shape"])


def _wait(predicate, timeout=60.0, what="the page"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value is not None and value is not False:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def driver():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    d = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield d
    d.quit()


def _help_example() -> list[str]:
    """The ``gradlab explore`` example of its own ``--help`` that serves without a browser."""
    proc = subprocess.run([sys.executable, "-c", "from gradlab_cli.app import main; main(['explore', '--help'])"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip().startswith("gradlab explore --no-browser")]
    assert lines, proc.stdout
    return lines[0].split()[1:]


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("panel")
    args = _help_example()
    proc = subprocess.Popen([sys.executable, "-u", "-c", "from gradlab_cli.app import main; main()", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        url = None
        end = time.monotonic() + 240
        while url is None and time.monotonic() < end:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            found = re.search(r"serving (http://\S+)", line)
            url = found.group(1) if found else None
        assert url, f"the server did not start (exit {proc.poll()})"
        assert url.startswith("http://127.0.0.1:")  # this machine only, by default
        yield url, args
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode is not None  # no server left running


def _press(driver, title, key, times=1):
    from selenium.webdriver.common.keys import Keys

    handle = _wait(lambda: driver.execute_script(HANDLE, title), what=f"the {title} slider")
    for _ in range(times):
        handle.send_keys(getattr(Keys, key))


def _shows(driver, name, want):
    """Wait until the page's source ``name`` holds ``want`` (the server's update may still be on its way)."""
    def same():
        got = _image(driver, name)
        return got is not None and got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6,
                                                                           equal_nan=True)
    try:
        _wait(same, timeout=60, what=name)
    except AssertionError:
        np.testing.assert_allclose(_image(driver, name), want, rtol=1e-5, atol=1e-6)  # says how they differ
        raise


def test_moving_a_slider_redraws_the_engines_maps(driver, server):
    url, args = server
    loss_name = args[args.index("--loss") + 1]
    driver.get(url)
    before = _wait(lambda: _image(driver, "explore_gd"), what="the GD map")
    tau0 = driver.execute_script(VALUE, "τ")
    _press(driver, "τ", "ARROW_RIGHT", times=2)
    tau = _wait(lambda: (lambda v: v if v is not None and v > tau0 + 0.009 else None)(driver.execute_script(VALUE, "τ")),
                what="the τ slider to move")
    assert tau == pytest.approx(tau0 + 0.01)  # two steps of 0.005
    loss = gradlab.get_loss(loss_name, tau=tau)
    proto = simulate.Protocol(grid=50, batches=200, batch_size=128)
    gd = simulate.gd_map(loss, proto).mean
    assert before.shape == gd.shape == (50, 50) and not np.allclose(before, gd)  # the map must change
    _shows(driver, "explore_gd", gd)
    _shows(driver, "explore_ratio", simulate.ratio_map(loss, proto).masked_mean())
    _shows(driver, "explore_weight", simulate.weight_map(loss, proto, gd_gate=0.05).mean)

    lemma_before = _image(driver, "explore_lemma1")
    _press(driver, "λ", "ARROW_RIGHT", times=5)
    lam = _wait(lambda: (lambda v: v if v is not None and v > 0.145 else None)(driver.execute_script(VALUE, "λ")),
                what="the λ slider to move")
    assert lam == pytest.approx(0.15)
    want = simulate.lemma1_map(proto, lam=lam, ratios=[1.5]).extra["satisfied"][0]
    assert not np.allclose(lemma_before, want)
    _shows(driver, "explore_lemma1", want)


def test_the_static_page_switches_precomputed_maps_in_the_browser(driver, tmp_path):
    pytest.importorskip("bokeh")
    from gradlab.explore import static_explorer

    small = {"grid": 8, "batches": 16, "batch_size": 16}
    page = static_explorer(tmp_path / "explorer.html", choices={"infonce": ("tau", (0.05, 0.1, 0.2))},
                           lams=(0.1, 0.6), **small)
    driver.get(page.as_uri())
    before = _wait(lambda: _image(driver, "explore_gd"), what="the static GD map")
    proto = simulate.Protocol(**small)
    np.testing.assert_allclose(before, simulate.gd_map(gradlab.get_loss("infonce", tau=0.05), proto).mean, rtol=1e-6)
    _press(driver, "τ", "ARROW_RIGHT", times=2)  # index 0 -> 2: τ = 0.2
    _wait(lambda: not np.array_equal(_image(driver, "explore_gd"), before), what="the switched map")
    loss = gradlab.get_loss("infonce", tau=0.2)
    np.testing.assert_allclose(_image(driver, "explore_gd"), simulate.gd_map(loss, proto).mean, rtol=1e-6)
    np.testing.assert_allclose(_image(driver, "explore_ratio"), simulate.ratio_map(loss, proto).masked_mean(), rtol=1e-6)
    _press(driver, "λ", "ARROW_RIGHT")
    want = simulate.lemma1_map(proto, lam=0.6, ratios=[1.5]).extra["satisfied"][0]
    _wait(lambda: np.allclose(_image(driver, "explore_lemma1"), want, rtol=1e-6), what="the λ = 0.6 panel")
    assert math.isclose(float(driver.execute_script(VALUE, "λ")), 1.0)  # the λ slider's index
