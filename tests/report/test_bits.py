"""FedCAMS Tables 1–2 from the model's size and the compressors' payloads, without training, and
against the paper's printed values."""

import pytest

from fedbench.papers.fedcams.room import TABLE2_COMPRESSORS
from fedbench.registry import UnknownNameError
from fedbench.report.bits import bits_report, bits_table, format_bits, formula_table, parse_compressor, sig3, write_bits
from fedbench.report.reference import reference_frame

TABLE2 = ["sign", "topk:ratio=1/64", "topk:ratio=1/128", "topk:ratio=1/256"]


def test_table2_for_cifar_resnet18_exactly():
    d, table = bits_table("resnet18", (3, 32, 32), 10, 500, [parse_compressor(c) for c in TABLE2])
    assert d == 11_173_962
    assert (table["Uncompressed"] == 357_566_784_000).all()
    assert table["One-way Compression"].tolist() == [184_370_389_000, 184_370_368_000, 181_576_864_000, 180_180_128_000]
    assert table["Two-way Compression"].tolist() == [11_173_994_000, 11_173_952_000, 5_586_944_000, 2_793_472_000]
    assert table.index.tolist() == [
        "Scaled sign",
        "Top-k with r = 1/64",
        "Top-k with r = 1/128",
        "Top-k with r = 1/256",
    ]


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


def test_report_against_the_paper_and_files(tmp_path):
    report = bits_report("resnet18", "3x32x32", 10, 500, list(TABLE2_COMPRESSORS), paper="fedcams")
    cells = report.agreement()
    assert len(cells) == 12 and cells["agree"].all() and report.agrees
    sign = cells.set_index(["Method", "column"]).loc[("Scaled sign", "One-way Compression")]
    assert (sign["ours"], sign["paper"], sign["ours_3sf"]) == (184_370_389_000, 1.84e11, "1.84e11")
    assert (sig3(5_586_944_000), sig3(357_566_784_000)) == ("5.59e9", "3.58e11")
    md, csv = (p.read_text() for p in write_bits(report, tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fedcams_table2.csv", "fedcams_table2.md"]
    assert "| Top-k with r = 1/256 | 3.58e11 / 3.58e11 |     1.80e11 / 1.80e11 |       2.79e9 / 2.79e9 |" in md
    assert "≈ 32(2k + d) × T / 32 × 2k × T + 32d × T" in md  # Table 1: the paper's form / ours
    assert "180,180,128,000" in md and "**12/12 printed cells agree with ours to 3 significant figures.**" in md
    assert csv.splitlines()[1] == "Scaled sign,Uncompressed,357566784000,358000000000.0,3.58e11,3.58e11,True"


def test_report_disagreement_and_errors(tmp_path):
    # ConvMixer is not the paper's model: every printed cell differs (ConvMixer top-k 1/128 one-way 9.66e9).
    report = bits_report("convmixer", (3, 32, 32), 10, 500, ["topk:ratio=1/128", "stochastic:bits=2"], "fedcams")
    cells = report.agreement().set_index(["Method", "column"])
    assert cells.loc[("Top-k with r = 1/128", "One-way Compression"), "ours_3sf"] == "9.66e9"
    assert not report.agrees and cells.loc[("Stochastic 2-bit", "Uncompressed"), "agree"] is None  # not a paper row
    assert "— / " in format_bits(report, "markdown") and "✗" in format_bits(report, "markdown")
    plain = bits_report("convmixer", "3x32x32", 10, 500, ["sign"])
    assert write_bits(plain, tmp_path)[0].name == "bits_convmixer_T500.md" and not plain.agrees
    with pytest.raises(ValueError, match="expected positive sizes like 3x32x32"):
        bits_report("convmixer", "3xx", 10, 500, ["sign"])
    with pytest.raises(ValueError, match="unknown compressor 'zip'"):
        bits_report("convmixer", "3x32x32", 10, 500, ["zip"])
    with pytest.raises(ValueError, match="no table of bits"):
        bits_report("convmixer", "3x32x32", 10, 500, ["sign"], paper="fedmim")
    with pytest.raises(ValueError, match="table 2 of fedcams holds bits, not final_acc or top_acc"):
        reference_frame("fedcams", "2")


def test_bits_command(tmp_path):
    from typer.testing import CliRunner

    from fedbench.cli import app

    run = CliRunner().invoke
    result = run(app, ["bits", "resnet18", "--paper", "fedcams", "--tables-dir", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "12/12 printed cells agree" in result.output and (tmp_path / "fedcams_table2.csv").exists()
    result = run(app, ["bits", "convmixer", "--paper", "fedcams", "--tables-dir", str(tmp_path / "c")])
    assert result.exit_code == 1 and "0/12 printed cells agree" in result.output
    assert run(app, ["bits", "resnet18", "--compressor", "zip"]).exit_code == 2
