"""The live explorer's latency: from a slider change to the new maps in the page's data sources.

``gradlab.explore.Explorer`` at the live protocol (50 × 50 cells, 200 batches of 128), in this
process: each row moves one slider back and forth ``--repeat`` times (a new value each time, so
nothing comes from the maps' cache) and times ``slider.value = v`` until its callback has put the
recomputed maps into the Bokeh sources (what the server then sends to the browser). The first
view of each loss (compilation) is not timed. The target is 150 ms per change.

``--browser`` adds the whole round trip where headless Chromium is installed (Debian's chromium and
chromium-driver): the server of ``gradlab explore --no-browser --port 0`` in its own process, the
page in Chromium, and per change the time from setting the slider's value in the page to the new
map in the page's data source (measured in the page with ``performance.now()``, polled every ~4 ms).

    python benchmarks/explore.py
    python benchmarks/explore.py --repeat 20 --grid 50 --batches 200 --batch-size 128
    python benchmarks/explore.py --browser
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

TARGET_MS = 150.0
#: (loss, slider) rows: every kind of slider of the page (a loss parameter, r, λ).
ROWS = [("infonce", "tau"), ("arccon", "tau"), ("arccon", "u"), ("met", "m"),
        ("compose:gd=indicator,weight=softmax,ratio=static", "m"), ("compose:gd=indicator,weight=softmax,ratio=static", "r"),
        ("infonce", "r"), ("infonce", "lam")]


def _values(spec, n: int) -> list[float]:
    """n distinct slider values around the start, on the slider's steps."""
    values, k = [], 1
    while len(values) < n:
        for sign in (1, -1):
            v = round(spec.value + sign * k * spec.step, 10)
            if spec.start <= v <= spec.end and len(values) < n:
                values.append(v)
        k += 1
    return values


#: In the page: set the slider titled arguments[0] to arguments[1]; resolve with the milliseconds until
#: the source named arguments[2] holds a new image.
ROUND_TRIP = """
const [title, value, name, done] = arguments;
const doc = Bokeh.documents[0];
const slider = [...doc.all_models].find(m => m.title !== undefined && m.start !== undefined
                                             && String(m.title).startsWith(title));
const source = doc.get_model_by_name(name);
const before = source.data.image[0];
const t0 = performance.now();
slider.value = value;
(function poll() {
  if (source.data.image[0] !== before) done(performance.now() - t0);
  else if (performance.now() - t0 > 10000) done(-1);
  else setTimeout(poll, 0);
})();
"""


def _row(loss: str, name: str, times: list[float]) -> None:
    times = sorted(times)
    med, p90 = statistics.median(times), times[min(len(times) - 1, int(0.9 * len(times)))]
    verdict = "ok" if med <= TARGET_MS else "OVER"
    print(f"{loss:<48} {name:<7} {med:9.1f} {p90:7.1f} {times[-1]:7.1f}  <= {TARGET_MS:.0f} ({verdict})")


def browser_rows(args) -> None:
    """The round trip in headless Chromium: slider value set in the page -> new map in the page."""
    chromium, driver_path = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        print("browser rows skipped: no chromium / chromedriver (apt-get install chromium chromium-driver)")
        return
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    cmd = [sys.executable, "-u", "-c", "from gradlab_cli.app import main; main()", "explore", "--no-browser",
           "--port", "0", "--loss", "infonce", "--grid", str(args.grid), "--batches", str(args.batches),
           "--batch-size", str(args.batch_size)]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    options = Options()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = None
    try:
        line = ""
        while "serving" not in line and server.poll() is None:
            line = server.stdout.readline()
        url = re.search(r"serving (http://\S+)", line).group(1)
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
        driver.set_script_timeout(30)
        driver.get(url)
        end = time.monotonic() + 60
        while time.monotonic() < end and not driver.execute_script(
                "return !!(window.Bokeh && Bokeh.documents.length && Bokeh.documents[0].get_model_by_name('explore_gd'))"):
            time.sleep(0.2)
        for title, name, source, values in (("τ", "tau", "explore_gd", [0.05 + 0.005 * k for k in range(1, 1 + args.repeat)]),
                                            ("λ", "lam", "explore_lemma1", [0.1 + 0.01 * k for k in range(1, 1 + args.repeat)])):
            times = [driver.execute_async_script(ROUND_TRIP, title, round(v, 4), source) for v in values]
            _row("infonce, in Chromium (round trip)", name, [t for t in times if t >= 0])
    finally:
        if driver is not None:
            driver.quit()
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--grid", type=int, default=50)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--browser", action="store_true", help="also time the round trip in headless Chromium")
    args = ap.parse_args()
    from gradlab.explore import Explorer, slider_specs

    load0 = os.getloadavg()
    print(f"gradlab explore: slider -> new maps, {args.grid} x {args.grid} grid, {args.batches} batches of "
          f"{args.batch_size}, {os.cpu_count()} CPUs; load average at start {load0[0]:.2f}")
    print(f"{'loss':<48} {'slider':<7} {'median ms':>9} {'p90 ms':>7} {'max ms':>7}  target")
    explorers = {}
    for loss, name in ROWS:
        if loss not in explorers:
            explorers[loss] = Explorer(loss, grid=args.grid, batches=args.batches, batch_size=args.batch_size)
        ex = explorers[loss]
        spec = {s.name: s for s in slider_specs(ex.view)}[name]
        times = []
        for v in _values(spec, args.repeat):
            t0 = time.perf_counter()
            ex.set(**{name: v})
            times.append(1e3 * (time.perf_counter() - t0))
        _row(loss, name, times)
    if args.browser:
        browser_rows(args)
    load1 = os.getloadavg()
    print(f"load average at end {load1[0]:.2f} (1 min), {load1[1]:.2f} (5 min)")


if __name__ == "__main__":
    main()
