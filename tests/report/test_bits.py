"""FedCAMS Tables 1–2 from the model's size and the compressors' payloads, without training."""

import pytest

from fedbench.registry import UnknownNameError
from fedbench.report.bits import bits_table, formula_table, parse_compressor

TABLE2 = ["sign", "topk:ratio=1/64", "topk:ratio=1/128", "topk:ratio=1/256"]


def test_table2_for_cifar_resnet18_exactly():
    d, table = bits_table("resnet18", (3, 32, 32), 10, 500, [parse_compressor(c) for c in TABLE2])
    assert d == 11_173_962
    assert (table["Uncompressed"] == 357_566_784_000).all()
    assert table["One-way Compression"].tolist() == [184_370_389_000, 184_370_368_000, 181_576_864_000, 180_180_128_000]
    assert table["Two-way Compression"].tolist() == [11_173_994_000, 11_173_952_000, 5_586_944_000, 2_793_472_000]
    assert table.index.tolist() == ["Scaled sign", "Top-k with r = 1/64", "Top-k with r = 1/128", "Top-k with r = 1/256"]


def test_convmixer_companion_numbers():
    d, table = bits_table("convmixer", (3, 32, 32), 10, 500, [parse_compressor("topk:ratio=1/128")])
    assert d == 594_186
    assert f"{table['One-way Compression'].iloc[0]:.3e}" == "9.656e+09"


def test_table1_formulas_and_parsing():
    table = formula_table([parse_compressor(c) for c in TABLE2])
    assert table.loc["Scaled sign", "One-way Compression"] == "(32 + d) × T + 32d × T"
    assert table.loc["Top-k", "Two-way Compression"] == "32 × 2k × 2T"
    assert parse_compressor("stochastic:bits=2") == ("stochastic", {"bits": 2.0})
    with pytest.raises(UnknownNameError, match="unknown compressor 'zip'"):
        parse_compressor("zip")
