"""Astronomy data: FITS loading, the data folder, and generated exposures."""

from __future__ import annotations

import numpy as np
import pytest

from workflows.astro_data import (BIAS, EXPOSURE_FILES, EXPOSURE_SHAPE, GAIN, OVERSCAN_COLS,
                                  READ_NOISE, SKY, ExposureError, data_dir, exposure_paths,
                                  generate_exposures, generate_scene, load_exposure, load_fits,
                                  subtract_background)


def write_fits(path, data):
    from astropy.io import fits

    fits.PrimaryHDU(data).writeto(path)
    return path


# ---------------------------------------------------------------------------------------
# the data folder
# ---------------------------------------------------------------------------------------


def test_data_dir_follows_subzero_data(monkeypatch, tmp_path):
    monkeypatch.setenv("SUBZERO_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    assert exposure_paths() is None  # the folder has no exposures
    (tmp_path / "lsst").mkdir()
    for f in EXPOSURE_FILES:
        (tmp_path / f).write_bytes(b"")
    assert exposure_paths() == tuple(tmp_path / f for f in EXPOSURE_FILES)


def test_data_dir_without_the_variable_is_the_shared_folder_or_none(monkeypatch):
    monkeypatch.delenv("SUBZERO_DATA", raising=False)
    d = data_dir()
    assert d is None or (d.is_dir() and d.parts[-2:] == ("shared", "data"))


# ---------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------


def test_uint16_round_trips_through_bitpix_16_with_bzero(tmp_path):
    from astropy.io import fits

    data = np.array([[0, 1, 32767], [32768, 40000, 65535]], dtype=np.uint16)
    path = write_fits(tmp_path / "e.fits", data)
    header = fits.getheader(path)
    assert header["BITPIX"] == 16 and header["BZERO"] == 32768
    got = load_exposure(path, shape=(2, 3))
    assert got.dtype == np.uint16 and np.array_equal(got, data)


def test_load_fits_returns_native_byte_order(tmp_path):
    data = np.arange(6, dtype=">f4").reshape(2, 3)
    got = load_fits(write_fits(tmp_path / "f.fits", data))
    assert got.dtype == np.dtype("float32") and got.dtype.isnative
    assert np.array_equal(got, data)


@pytest.mark.parametrize("make, match", [
    (lambda p: p / "missing.fits", "does not exist"),
    (lambda p: (p / "text.fits").write_text("not a fits file") and p / "text.fits",
     "cannot read"),
    (lambda p: write_fits(p / "small.fits", np.zeros((4, 5), np.uint16)),
     r"shape \(4, 5\); expected \(2001, 513\)"),
    (lambda p: write_fits(p / "float.fits", np.zeros(EXPOSURE_SHAPE, np.float32)),
     "float32 pixels"),
    (lambda p: write_fits(p / "neg.fits", np.full(EXPOSURE_SHAPE, -5, np.int32)),
     "counts -5..-5"),
    (lambda p: write_fits(p / "cube.fits", np.zeros((2, 3, 4), np.uint16)), "3 axes"),
])
def test_bad_exposure_files_are_clear_errors(tmp_path, make, match):
    with pytest.raises(ExposureError, match=match):
        load_exposure(make(tmp_path))


def test_real_exposures(shared_data):
    paths = exposure_paths(shared_data)
    assert paths is not None
    a, b = (load_exposure(p) for p in paths)
    for e in (a, b):
        assert e.shape == EXPOSURE_SHAPE and e.dtype == np.uint16
        assert 1550 <= np.median(e) <= 1650 and 990 <= e.min() and e.max() <= 65535
        assert 1000 <= e[0, 0] <= 1015  # the overscan corner the workflow subtracts
    assert not np.array_equal(a, b)


# ---------------------------------------------------------------------------------------
# generated exposures
# ---------------------------------------------------------------------------------------


def test_generated_exposures_look_like_lsst():
    a, b = generate_exposures(seed=0)
    for e in (a, b):
        assert e.shape == EXPOSURE_SHAPE and e.dtype == np.uint16
        assert 1550 <= np.median(e) <= 1650
        assert 950 <= e.min() and 30_000 <= e.max() <= 65_535
        sky = e[100:, 100:].astype(np.float64)
        robust = 1.4826 * np.median(np.abs(sky - np.median(sky)))
        expected = np.sqrt(SKY * GAIN + READ_NOISE**2) / GAIN
        assert abs(robust - expected) < 2.0
        assert abs(np.median(e[:, :OVERSCAN_COLS]) - BIAS) <= 1  # overscan strip: bias only


def test_generation_is_deterministic_per_seed():
    a = generate_scene(seed=4, shape=(80, 60))
    b = generate_scene(seed=4, shape=(80, 60))
    c = generate_scene(seed=5, shape=(80, 60))
    assert np.array_equal(a.exp1, b.exp1) and np.array_equal(a.cr2, b.cr2)
    assert not np.array_equal(a.exp1, c.exp1)


def test_stars_are_shared_and_cosmic_rays_differ():
    s = generate_scene(seed=2, shape=(400, 300), n_stars=40, n_cosmics=30)
    assert len(s.star_table) == 40 and s.stars.max() > 1_000
    bright = (s.stars > 500) & ~s.cr1 & ~s.cr2
    d1 = s.exp1[bright].astype(np.float64) - BIAS - SKY
    d2 = s.exp2[bright].astype(np.float64) - BIAS - SKY
    # the same star signal, independent noise: both track the model within a few sigma
    sig = np.sqrt((s.stars[bright] + SKY) / GAIN) + 5
    assert np.all(np.abs(d1 - s.stars[bright]) < 6 * sig)
    assert np.all(np.abs(d2 - s.stars[bright]) < 6 * sig)
    assert s.cr1.sum() >= 30 and s.cr2.sum() >= 30
    assert (s.cr1 & s.cr2).sum() < 0.2 * s.cr1.sum()
    model = BIAS + SKY + s.stars
    assert np.all(s.exp1[s.cr1] - model[s.cr1] > 60)  # deposits of 150+ counts


def test_cosmic_rays_are_much_sharper_than_the_psf():
    s = generate_scene(seed=6, shape=(300, 300), n_stars=1, n_cosmics=60)
    from scipy import ndimage

    lab, n = ndimage.label(s.cr1, np.ones((3, 3)))
    sizes = np.bincount(lab.reshape(-1))[1:]
    assert n > 40 and sizes.max() <= 6 and np.median(sizes) <= 3  # 1-3 px (tracks may touch)
    assert (s.stars > 0.5 * s.stars.max()).sum() >= 5  # a star's core covers more pixels


def test_tiny_and_bad_shapes():
    s = generate_scene(seed=0, shape=(5, 3))
    assert s.exp1.shape == (5, 3)
    for bad in [(0, 5), (3, 4, 5), "big"]:
        with pytest.raises(ExposureError, match="two positive ints"):
            generate_scene(shape=bad)


def test_subtract_background_is_the_calibration_chain():
    exp = np.array([[10, 0], [14, 16]], dtype=np.uint16)
    # 0 -> 90 (bad pixel), minus the (0, 0) overscan value, minus the mean
    x = np.array([[10.0, 90.0], [14.0, 16.0]]) - 10.0
    assert np.array_equal(subtract_background(exp), x - x.mean())
