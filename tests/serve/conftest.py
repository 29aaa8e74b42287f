"""A home with one astronomy run (the real LSST exposures when they are here), a running
`subzero serve` on it (started on 127.0.0.1, stopped by PID), and a headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from subzero.api import Home

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="session")
def astro_home(spark, tmp_path_factory):
    """A home holding one complete astronomy run (subzero strategy)."""
    home = tmp_path_factory.mktemp("serve") / "home"
    run = Home(home).run("astronomy", quiet=True)
    return home, run


class Server:
    """`subzero serve` in a subprocess: its URL, its process, and a JSON client."""

    def __init__(self, home: Path, *args: str, env: dict | None = None) -> None:
        e = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "subzero.cli", "serve", "--home", str(home), "--port", "0",
             *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=e)
        line = self.proc.stderr.readline()  # "subzero: serving HOME at URL (Ctrl-C stops)"
        if " at http" not in line:
            self.stop()
            raise RuntimeError(f"subzero serve did not start: {line}")
        self.url = line.split(" at ", 1)[1].split(" ", 1)[0].split("?")[0].rstrip("/")

    def get(self, path: str, headers: dict | None = None, data: bytes | None = None
            ) -> tuple[int, bytes, dict]:
        req = urllib.request.Request(self.url + path, data=data, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    def json(self, path: str, body: dict | None = None, headers: dict | None = None
             ) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        h = dict(headers or {}, **({"Content-Type": "application/json"} if data else {}))
        status, raw, _ = self.get(path, h, data)
        return status, json.loads(raw)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()


@pytest.fixture(scope="session")
def server(astro_home):
    home, _ = astro_home
    s = Server(home)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def browser():
    """Debian's headless Chromium driven by Selenium (skipped, saying why, without it)."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip(f"no headless browser: {CHROMIUM} and {CHROMEDRIVER} are needed "
                    "(make test installs Debian's chromium and chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
              "--no-first-run", "--disable-background-networking", "--disable-sync",
              "--disable-component-update", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


#: a TAN WCS with a rotated CD matrix, like the LSST exposures'
TAN = {"CTYPE1": "RA---TAN", "CTYPE2": "DEC--TAN", "CRVAL1": 150.25, "CRVAL2": 2.5,
       "CRPIX1": 16.5, "CRPIX2": 24.0, "CD1_1": -5.0e-5, "CD1_2": 1.0e-5,
       "CD2_1": 1.0e-5, "CD2_2": 5.0e-5, "RADESYS": "ICRS", "EQUINOX": 2000.0}
#: the shape of the sky home's image
SKY_SHAPE = (48, 32)


def sky_header(cards: dict, shape=SKY_SHAPE):
    """A FITS header of a 2-d image of ``shape`` with ``cards``."""
    from astropy.io import fits

    h = fits.Header()
    h["NAXIS"], h["NAXIS1"], h["NAXIS2"] = 2, shape[1], shape[0]
    for k, v in cards.items():
        h[k] = v
    return h


@pytest.fixture(scope="session")
def sky_home(spark, tmp_path_factory):
    """A home with an example run whose inputs are files (the image a FITS file with a TAN
    WCS), a replay of it, and a generated example run."""
    import numpy as np
    from astropy.io import fits

    from subzero.api import Home

    d = tmp_path_factory.mktemp("sky")
    img = np.random.default_rng(0).integers(1000, 3000, SKY_SHAPE).astype(np.uint16)
    fits.PrimaryHDU(img, header=sky_header(TAN)).writeto(d / "calexp-0001.fits")
    np.save(d / "thr.npy", np.full((1, 1), 200.0))
    home = Home(d / "home")
    run = home.run("example", inputs={"image": str(d / "calexp-0001.fits"),
                                      "threshold": str(d / "thr.npy")},
                   shape="48x32", split=(2, 2), quiet=True)
    replay = run.replay("image", [(3, 3), (40, 20)], value=60000, quiet=True)
    made = home.run("example", shape="48x32", quiet=True)
    server = Server(d / "home")
    yield run, replay, made, server
    server.stop()
