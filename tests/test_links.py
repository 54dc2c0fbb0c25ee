"""Links stay inside the folder a source lists: a local link whose target is outside it is refused
and counted (``not_a_file``), unless the source follows links; links that stay inside are read.

The same judgement in the three listings: the one-shot glob (``list_inputs``), the ledger listing of
batched builds and the corpus service (``list_raw_files``), and the explicit files of one ingest
batch (``judge_urls``, against the source's glob). A source whose every match is refused (a Hugging Face
hub cache's snapshot files are links into its blobs/) is one line before anything is read.
"""

from __future__ import annotations

import json
import os

import pytest

from pipelines.jobs.build_config import build_config_from_options
from pipelines.options import BuildOptions
from pipelines.sources import read_input
from pipelines.sources.listing import check_some_readable, judge_urls, list_inputs
from pipelines.sources.rawfiles import list_raw_files
from pipelines.sources.readers import Tally
from schemas.config import SourceConfig
from schemas.errors import UserError


def linked_folder(tmp_path):
    """raw/ (the listed folder) with a file, links inside and out; outside/ holds a secret."""
    raw, outside = tmp_path / "raw", tmp_path / "outside"
    (raw / "sub").mkdir(parents=True)
    outside.mkdir()
    (raw / "good.jsonl").write_text('{"text": "inside"}\n')
    (raw / "sub" / "deep.jsonl").write_text('{"text": "deep inside"}\n')
    (outside / "secret.jsonl").write_text('{"text": "outside text"}\n')
    os.symlink(raw / "good.jsonl", raw / "alias.jsonl")  # stays inside: read
    os.symlink("sub/deep.jsonl", raw / "rel.jsonl")  # relative, inside: read
    os.symlink(outside / "secret.jsonl", raw / "leak.jsonl")  # leaves: refused
    os.symlink("../../outside/secret.jsonl", raw / "sub" / "leak2.jsonl")  # leaves, relative, deeper
    os.symlink(tmp_path / "nowhere", raw / "gone.jsonl")  # dangling: the reader says unreadable
    return raw, outside


def test_a_glob_refuses_links_out_of_its_folder_unless_told_to_follow(tmp_path):
    raw, _ = linked_folder(tmp_path)
    judged = dict(list_inputs(str(raw / "*.jsonl")))
    assert judged == {str(raw / "good.jsonl"): None, str(raw / "alias.jsonl"): None, str(raw / "rel.jsonl"): None,
                      str(raw / "gone.jsonl"): None, str(raw / "leak.jsonl"): "not_a_file"}
    assert dict(list_inputs(str(raw)))[str(raw / "sub" / "leak2.jsonl")] == "not_a_file"  # a folder URL too
    assert dict(list_inputs(str(raw / "**" / "*.jsonl")))[str(raw / "sub" / "leak2.jsonl")] == "not_a_file"
    followed = dict(list_inputs(str(raw / "*.jsonl"), follow_links=True))
    assert followed[str(raw / "leak.jsonl")] is None
    # a file named on its own is read whatever it links to: it is what was listed
    assert dict(list_inputs(str(raw / "leak.jsonl"))) == {str(raw / "leak.jsonl"): None}


def test_the_refused_link_is_one_counted_reject_that_says_where_it_leads(tmp_path):
    raw, outside = linked_folder(tmp_path)
    entry = (str(raw / "leak.jsonl"), "not_a_file")
    tally = Tally()
    recs = list(read_input(entry, SourceConfig(name="web", input=str(raw / "*.jsonl")), tally))
    assert tally.read == 1 and [r.reason for r in recs] == ["not_a_file"]
    assert str(outside / "secret.jsonl") in recs[0].snippet and "follow_links" in recs[0].snippet
    assert (recs[0].file, recs[0].position) == (str(raw / "leak.jsonl"), "whole file")


def test_the_ledger_listing_and_an_ingest_batch_judge_links_the_same_way(tmp_path):
    raw, outside = linked_folder(tmp_path)
    listed = {f.url: f for f in list_raw_files(str(raw))}
    leak = listed[str(raw / "sub" / "leak2.jsonl")]
    assert (leak.size, leak.checksum) == (0, "skipped:not_a_file")
    assert listed[str(raw / "alias.jsonl")].checksum is None  # inside: a file, fingerprinted when needed
    followed = {f.url: f for f in list_raw_files(str(raw), follow_links=True)}
    assert followed[str(raw / "sub" / "leak2.jsonl")].size == os.path.getsize(outside / "secret.jsonl")
    urls = [str(raw / "alias.jsonl"), str(raw / "leak.jsonl")]
    assert dict(judge_urls(urls, str(raw / "*.jsonl"))) == {urls[0]: None, urls[1]: "not_a_file"}
    assert dict(judge_urls(urls, str(raw / "*.jsonl"), follow_links=True)) == {u: None for u in urls}


def test_follow_links_is_a_build_flag_and_a_source_setting(tmp_path):
    cfg = build_config_from_options(BuildOptions(["--input", "web=raw/*.jsonl", "--follow_links"]))
    assert [s.follow_links for s in cfg.sources] == [True]
    cfg = build_config_from_options(BuildOptions(["--input", "web=raw/*.jsonl"]))
    assert [s.follow_links for s in cfg.sources] == [False]


def test_a_source_tagged_other_keeps_its_name_among_several_inputs():
    cfg = build_config_from_options(BuildOptions(["--input", "a/*.jsonl", "--input", "b/*.jsonl",
                                                  "--input", "web=c/*.jsonl", "--input", "other=d/*.jsonl"]))
    assert [s.name for s in cfg.sources] == ["other0", "other1", "web", "other"]


def hub_cache(tmp_path):
    """A Hugging Face hub cache as ``datasets`` leaves it: the files under snapshots/<rev>/ are relative links
    into blobs/, named by their hash."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    repo = tmp_path / "hub" / "datasets--cc_news"
    (repo / "blobs").mkdir(parents=True)
    split = repo / "snapshots" / "1c2d" / "plain_text"
    split.mkdir(parents=True)
    from realtext import news_documents

    news = news_documents()
    for i in range(2):
        pq.write_table(pa.table({"text": news[3 * i:3 * i + 3]}), repo / "blobs" / f"b{i}f00d")
        os.symlink(f"../../../blobs/b{i}f00d", split / f"train-0000{i}-of-00002.parquet")
    return split


def test_a_source_whose_every_match_is_a_link_out_is_one_line_naming_follow_links(tmp_path):
    """The one-shot and the batched build refuse it before reading anything, in one line that names the link's
    target and the flag; with the flag, the same command reads every file."""
    from test_cli_errors import one_line_error, run

    split = hub_cache(tmp_path)
    for extra in ([], ["--batch_mb", "1"]):
        line = one_line_error(run("-m", "shardforge.cli", "build", "--input", f"{split}/*.parquet", "--output",
                                  str(tmp_path / "out"), *extra))
        assert line.startswith(f"error: source other: none of the 2 matches of {split}/*.parquet can be read: "
                               f"2 links out of the folder it names ({split}/train-00000-of-00002.parquet leads to "
                               f"{split.parents[2] / 'blobs' / 'b0f00d'}): --follow_links reads"), line
        assert not (tmp_path / "out").exists()
    res = run("-m", "shardforge.cli", "build", "--input", f"{split}/*.parquet", "--output", str(tmp_path / "out"),
              "--follow_links", "--vocab_size", "500", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["accounting"]["other"]["input"] == 6 and not manifest["accounting"]["other"].get("rejected")


def test_what_the_skipped_matches_are_is_said_and_one_readable_file_is_enough(tmp_path):
    raw = tmp_path / "raw"
    (raw / "a").mkdir(parents=True)
    (raw / "b").mkdir()
    (raw / ".part.jsonl").write_text('{"text": "half written"}\n')
    folders = [(str(raw / "a"), "not_a_file"), (str(raw / "b"), "not_a_file")]
    with pytest.raises(UserError) as e:
        check_some_readable("web", str(raw / "*"), folders)
    assert str(e.value) == (f"source web: none of the 2 matches of {raw}/* can be read: 2 folders (or devices): the "
                            f"folder itself reads every file under it ({raw}), or a glob that matches files "
                            f"({raw}/**/*.jsonl)")
    with pytest.raises(UserError) as e:
        check_some_readable("web", str(raw), [(str(raw / ".part.jsonl"), "hidden_file")])
    assert str(e.value).startswith(f"source web: the one match of {raw} cannot be read: 1 hidden name (a leading '.'")
    assert str(e.value).endswith(f"reads them ({raw}/.*.jsonl)")
    check_some_readable("web", str(raw / "*"), [*folders, (str(raw / "c.jsonl"), None)])  # one to read: counted
    check_some_readable("web", str(raw / "*"), [])  # no match at all: the caller's own line


def test_a_build_that_left_matches_unread_says_so_and_names_follow_links():
    """Links out among files that are read are counted rejects, and the build's warnings (stderr and the report)
    say how many and which flag reads them; a source that follows links, or has none, gets no such line."""
    from pipelines.report.record import build_warnings

    def warnings(rejected: dict[str, int], follow: bool = False) -> list[str]:
        return build_warnings({"config": {"packing": {"valid_fraction": 0}, "sources": [
            {"name": "web", "input": "raw/*.jsonl", "follow_links": follow}]}, "totals": {},
            "accounting": {"web": {"input": 100, "rejected": rejected}}})

    (line,) = warnings({"not_a_file": 2, "binary": 1})
    assert line == ("warning: 2 matches of source 'web' were not read (not_a_file: folders, devices or links; "
                    "report.html's rejects name each, and where a link leads): a link out of the folder the source "
                    "names is read with --follow_links")
    assert warnings({"not_a_file": 1})[0].startswith("warning: 1 match of source 'web' was not read")
    assert warnings({"binary": 1}) == [] and warnings({"not_a_file": 1}, follow=True) == []
