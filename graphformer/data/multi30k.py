"""Multi30k task 1 (WMT16 multimodal, text only): English -> German.

The twelve raw files (train, val and the four test sets, English and German) come from the public ``multi30k/dataset`` repository at a pinned commit, are
checked against pinned SHA-256 sums, and are kept in a cache (``$GRAPHFORMER_CACHE`` or
``~/.cache/graphformer``). A local mirror directory holding the same files can be given instead
of the network. A file is written to the cache under a temporary name and renamed only once its
checksum is right, so a failed or corrupt download never leaves a file that looks good; a cached
file is checked again on every fetch, and one that no longer matches (truncated or altered since)
is named in a warning and fetched afresh, never used.

Text is tokenized with the Moses tokenizer (sacremoses; aggressive hyphen splitting, cased) and
detokenized for output, as in the original DGL example.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tqdm.auto import tqdm

from graphformer.data.text import split_lines, write_lines_atomic
from graphformer.errors import UserError

COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
BASE_URL = f"https://raw.githubusercontent.com/multi30k/dataset/{COMMIT}/data/task1/raw"
SHA256 = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
}
# The four standard test sets; the first is the ``test`` split every task has. test_2017_mscoco is out
# of domain (COCO captions, not Flickr's).
TEST_SETS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")
SPLIT_FILES = {"train": "train", "valid": "val", "test": TEST_SETS[0], **{name: name for name in TEST_SETS[1:]}}
SRC_LANG, TGT_LANG = "en", "de"


def cache_dir() -> Path:
    root = os.environ.get("GRAPHFORMER_CACHE") or Path.home() / ".cache" / "graphformer"
    return Path(root) / "multi30k"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(url: str, target: Path, name: str) -> None:
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(target, "wb") as out:
            length = response.headers.get("Content-Length") or ""
            total = int(length) if length.isdigit() else None  # only for the progress bar
            with tqdm(total=total, unit="B", unit_scale=True, desc=name, leave=False) as bar:
                for chunk in iter(lambda: response.read(1 << 16), b""):
                    out.write(chunk)
                    bar.update(len(chunk))
    except (urllib.error.URLError, http.client.HTTPException, OSError) as err:  # HTTPException: a garbled reply
        raise UserError(
            f"could not download {name} from {url} ({err}); check the network or give a local copy with --data-dir"
        ) from None


def fetch(mirror: str | Path | None = None, cache: Path | None = None, base_url: str = BASE_URL) -> Path:
    """The cache directory with every file of `SHA256` present and verified.

    Files come from ``mirror`` (a local directory) when given, otherwise from ``base_url``.
    """
    if mirror is not None and not Path(mirror).is_dir():  # refused even when the cache needs nothing from it
        raise UserError(
            f"the Multi30k mirror {mirror} is not a directory; give the folder that holds the "
            "raw files, or no --data-dir to download them"
        )
    if mirror is not None and not any((Path(mirror) / name).is_file() for name in SHA256):  # a mistyped folder
        raise UserError(
            f"the Multi30k mirror {mirror} holds none of the raw files ({', '.join(SHA256)}); give "
            "the folder that holds them, or no --data-dir to download them"
        )
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    for name, expected in SHA256.items():
        final = cache / name
        if final.is_file():
            if sha256_of(final) == expected:
                continue
            origin = f"the mirror {mirror}" if mirror is not None else base_url
            tqdm.write(
                f"graphformer: warning: {final} does not match its pinned SHA-256 (truncated or altered); "
                f"not using it: fetching it again from {origin}",
                file=sys.stderr,
            )
        partial = cache / f".{name}.partial-{os.getpid()}"
        try:
            if mirror is not None:
                source = Path(mirror) / name
                if not source.is_file():
                    raise UserError(f"{source} is missing; the mirror needs all {len(SHA256)} Multi30k files")
                shutil.copyfile(source, partial)
            else:
                _download(f"{base_url}/{name}", partial, name)
            got = sha256_of(partial)
            if got != expected:
                advice = (
                    f"replace it in the mirror {mirror}"
                    if mirror is not None
                    else "run again to download it afresh (or give a local copy with --data-dir)"
                )
                raise UserError(
                    f"{name} is corrupt or truncated (sha256 {got[:12]}..., expected {expected[:12]}...); {advice}"
                )
            os.replace(partial, final)
        finally:
            partial.unlink(missing_ok=True)
    return cache


def read_gz(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return split_lines(f.read())


class MosesPipeline:
    """Moses tokenization (aggressive hyphen splitting, cased) and detokenization of one language."""

    def __init__(self, lang: str):
        from sacremoses import MosesDetokenizer, MosesTokenizer

        self.lang = lang
        self._tok, self._detok = MosesTokenizer(lang), MosesDetokenizer(lang)

    def tokenize(self, line: str) -> list[str]:
        return self._tok.tokenize(line, aggressive_dash_splits=True, escape=False)

    def detokenize(self, tokens: list[str]) -> str:
        return self._detok.detokenize(tokens)


def prepare(data_dir: Path, mirror: str | Path | None = None) -> Path:
    """Fetch, tokenize, and write ``data_dir/{split}.{src,tgt}`` (tokenized) for every split of
    `SPLIT_FILES` plus the raw references ``data_dir/{split}.ref`` for BLEU. Nothing is done when all of them are there;
    otherwise all are written afresh."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if all((data_dir / f"{s}.{side}").is_file() for s in SPLIT_FILES for side in ("src", "tgt", "ref")):
        return data_dir
    raw = fetch(mirror)
    src_tok, tgt_tok = MosesPipeline(SRC_LANG), MosesPipeline(TGT_LANG)
    for split, stem in SPLIT_FILES.items():
        en, de = read_gz(raw / f"{stem}.{SRC_LANG}.gz"), read_gz(raw / f"{stem}.{TGT_LANG}.gz")
        write_lines_atomic(data_dir / f"{split}.src", [" ".join(src_tok.tokenize(x)) for x in en])
        write_lines_atomic(data_dir / f"{split}.tgt", [" ".join(tgt_tok.tokenize(x)) for x in de])
        write_lines_atomic(data_dir / f"{split}.ref", de)
    return data_dir
