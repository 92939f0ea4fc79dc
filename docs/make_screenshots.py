"""Makes the README's training-health pictures from the demo runs, with a real TensorBoard and Chromium.

    .venv/bin/python docs/make_screenshots.py            # trains the two digits runs of `make demo` first
    .venv/bin/python docs/make_screenshots.py --logdir runs   # uses runs already trained by `make demo`

Writes docs/health_findings.png (the findings above the graph coloured by dead fraction),
docs/health_matrix.png (the layers x steps matrix of both runs) and docs/health_graph.png (the graph
coloured by gradient L2 at a step).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
IFRAME = 'iframe[src*="plugin_entry.html?name=xray"]'
RUNS = "digits_lr0.6,digits_lr0.05"


def train(logdir: Path) -> None:
    for lr in ("0.05", "0.6"):
        subprocess.run([sys.executable, str(REPO / "examples" / "digits.py"), "--logdir", str(logdir / f"digits_lr{lr}"),
                        "--lr", lr, "--epochs", "4", "--captures", "45"], check=True, cwd=REPO)


def shoot(url: str) -> None:
    from playwright.sync_api import sync_playwright

    shots = {
        "health_findings.png": (f"#xray&p.xray.run={RUNS}&p.xray.view=graph&p.xray.stat=dead_fraction", "[data-view=graph][data-state=ready] [data-value]"),
        "health_matrix.png": (f"#xray&p.xray.run={RUNS}&p.xray.view=health&p.xray.stat=dead_fraction", "[data-view=health] [data-steps]"),
        "health_graph.png": (f"#xray&p.xray.run=digits_lr0.05&p.xray.view=graph&p.xray.stat=grad_l2", "[data-view=graph][data-state=ready] [data-value]"),
    }
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                             args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                                   "--disable-component-update", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        for name, (fragment, ready) in shots.items():
            page.goto("about:blank")
            page.goto(f"{url}/{fragment}")
            page.frame_locator(IFRAME).locator(ready).first.wait_for(timeout=60_000)
            page.wait_for_timeout(800)  # fonts and the last paint
            page.screenshot(path=str(REPO / "docs" / name))
            print("wrote", REPO / "docs" / name)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logdir", help="a logdir holding digits_lr0.05 and digits_lr0.6 (default: train them now)")
    args = parser.parse_args()
    from tests.tensorboard_server import tensorboard

    with tempfile.TemporaryDirectory() as tmp:
        logdir = Path(args.logdir) if args.logdir else Path(tmp) / "runs"
        if not args.logdir:
            train(logdir)
        with tensorboard(sys.executable, logdir, cwd=Path(tmp)) as url:
            shoot(url)


if __name__ == "__main__":
    main()
