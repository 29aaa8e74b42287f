"""Astronomy data: FITS loading, the data folder, and generated exposures."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from subzero.cells import Box

from workflows.astro_data import (BIAS, EXPOSURE_FILES, EXPOSURE_SHAPE, GAIN, NOISE_BAND_ROWS,
                                  OVERSCAN_COLS, OVERSCAN_ROWS, PSF_SIGMA, READ_NOISE, SKY,
                                  ExposureError, ExposureField, data_dir, exposure_paths,
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
        assert abs(np.median(e[:OVERSCAN_ROWS, :]) - BIAS) <= 2  # and the overscan row
        assert np.std(e[:OVERSCAN_ROWS, OVERSCAN_COLS:]) < 15  # read noise only, no stars


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
    model[:OVERSCAN_ROWS, :] = model[:, :OVERSCAN_COLS] = BIAS  # the overscan sees no light
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


# ---------------------------------------------------------------------------------------
# generated box by box: any box is the same slice of the whole exposure
# ---------------------------------------------------------------------------------------


@st.composite
def fields(draw, max_rows=3 * NOISE_BAND_ROWS + 9, max_cols=70):
    """A small ExposureField: up to a few noise bands, stars and hits near any edge."""
    shape = (draw(st.integers(1, max_rows)), draw(st.integers(1, max_cols)))
    n_stars = draw(st.none() | st.integers(0, 40))
    n_cosmics = draw(st.none() | st.integers(0, 20))
    return ExposureField(draw(st.integers(0, 2**63)), shape, n_stars, n_cosmics)


@st.composite
def boxes(draw, shape):
    lo, hi = [], []
    for n in shape:
        a, b = sorted((draw(st.integers(0, n)), draw(st.integers(0, n))))
        lo.append(a)
        hi.append(b)
    return Box(tuple(lo), tuple(hi))


def whole(field):
    """The field's scene made whole, by generate_scene."""
    return generate_scene(field.seed, field.shape, field.n_stars, field.n_cosmics)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), field=fields(), e=st.sampled_from([1, 2]))
def test_any_box_of_blocks_is_the_same_slice_of_the_whole_exposure(data, field, e):
    box = data.draw(boxes(field.shape))
    scene = whole(field)
    exp, cr = (scene.exp1, scene.cr1) if e == 1 else (scene.exp2, scene.cr2)
    got = field.blocks(e)(box)
    assert got.dtype == np.uint16 and got.shape == box.shape
    assert np.array_equal(got, exp[box.slices])
    assert np.array_equal(field.cosmic_rays(e, box), cr[box.slices])
    assert np.array_equal(field.stars(box), scene.stars[box.slices])


@settings(max_examples=25, deadline=None)
@given(data=st.data(), field=fields())
def test_any_grid_of_blocks_reassembles_the_whole_exposure(data, field):
    h, w = field.shape
    cuts = [sorted(set(data.draw(st.lists(st.integers(1, n - 1), max_size=4))) if n > 1 else [])
            for n in (h, w)]
    rows, cols = ([0, *c, n] for c, n in zip(cuts, (h, w)))
    grid = [[field.exposure(2, Box((r0, c0), (r1, c1))) for c0, c1 in zip(cols, cols[1:])]
            for r0, r1 in zip(rows, rows[1:])]
    assert np.array_equal(np.block(grid), whole(field).exp2)


def test_generate_functions_are_the_whole_box():
    f = ExposureField(seed=9, shape=(150, 40))
    full = Box.full(f.shape)
    a, b = generate_exposures(seed=9, shape=(150, 40))
    assert np.array_equal(a, f.exposure(1, full)) and np.array_equal(b, f.exposure(2, full))
    s = generate_scene(seed=9, shape=(150, 40))
    assert np.array_equal(s.exp1, a) and np.array_equal(s.star_table, f.star_table)
    assert np.array_equal(s.cr2, f.cosmic_rays(2, full))


def test_one_row_band_does_not_depend_on_the_others():
    """A box inside one noise band equals the whole exposure's slice, and rows of another
    band are not made (the band's generator is seeded by its index alone)."""
    f = ExposureField(seed=1, shape=(4 * NOISE_BAND_ROWS, 30))
    band = Box((2 * NOISE_BAND_ROWS + 3, 5), (2 * NOISE_BAND_ROWS + 9, 25))
    assert np.array_equal(f.exposure(1, band), generate_exposures(1, f.shape)[0][band.slices])
    # the two exposures draw different noise in the same band
    assert not np.array_equal(f.exposure(1, band), f.exposure(2, band))


def test_star_field_is_gaussian_with_the_psf_sigma():
    f = ExposureField(seed=0, shape=(60, 60), n_stars=1, n_cosmics=0)
    (row, col, peak), = f.star_table
    stars = f.stars(Box.full(f.shape))
    yy, xx = np.mgrid[0:60, 0:60]
    model = peak * np.exp(-((yy - row) ** 2 + (xx - col) ** 2) / (2 * PSF_SIGMA**2))
    near = (np.abs(yy - np.floor(row)) <= 8) & (np.abs(xx - np.floor(col)) <= 8)
    assert np.allclose(stars[near], model[near]) and not stars[~near].any()


def test_cosmic_ray_tables_are_short_tracks_of_150_to_5000_counts():
    f = ExposureField(seed=5, shape=(300, 200), n_cosmics=50)
    for e in (1, 2):
        t = f.cosmic_table(e)
        assert 50 <= len(t) <= 150 and np.all(np.diff(t[:, 0]) >= 0)  # sorted by row
        assert np.all((t[:, 2] >= 150) & (t[:, 2] <= 5000))
        assert np.all((t[:, 0] >= 0) & (t[:, 0] < 300) & (t[:, 1] >= 0) & (t[:, 1] < 200))
    assert not np.array_equal(f.cosmic_table(1), f.cosmic_table(2))


def test_default_counts_scale_with_the_image():
    f = ExposureField(seed=0, shape=(16008, 4104))  # 64x one CCD: tables only, no pixels
    assert (f.n_stars, f.n_cosmics) == (16008 * 4104 // 4000, 16008 * 4104 // 20000)
    assert f.star_table.shape == (f.n_stars, 3)
    assert ExposureField(seed=0, shape=(5, 3)).n_stars == 1


def test_fields_pickle_small_and_make_the_same_blocks():
    f = ExposureField(seed=3, shape=(16008, 4104))
    f.star_table  # cached tables are not pickled ...
    blob = pickle.dumps(f.blocks(2))
    assert len(blob) < 1000
    g = pickle.loads(blob)  # ... and are made again where the blocks run
    box = Box((8000, 100), (8003, 110))
    assert np.array_equal(g(box), f.exposure(2, box))


@pytest.mark.parametrize("kwargs, match", [
    ({"shape": (0, 5)}, "two positive ints"),
    ({"seed": -1}, "seed must be a non-negative int. Got -1"),
    ({"seed": 1.5}, "seed must be a non-negative int. Got 1.5"),
    ({"n_stars": -2}, "n_stars must be a non-negative int. Got -2"),
])
def test_bad_field_parameters(kwargs, match):
    with pytest.raises(ExposureError, match=match):
        ExposureField(**kwargs)


def test_bad_boxes_and_exposures():
    f = ExposureField(seed=0, shape=(20, 10))
    with pytest.raises(ExposureError, match=r"box 0:21,0:10 does not fit in the exposure's shape"):
        f.exposure(1, Box((0, 0), (21, 10)))
    with pytest.raises(ExposureError, match="exposure must be 1 or 2. Got 3"):
        f.blocks(3)
    assert f.exposure(1, Box((4, 4), (4, 9))).shape == (0, 5)
