"""Documentation search (issue 16): HNSW search against an exact scan, and indexing against raw embeddings, same run.

An embedded PostgreSQL (or DATABASE_URL, in a scratch database) gets agent-runner's schema; one
workspace is filled with `--chunks` synthetic chunks (default 100,000) whose vectors are the
scripted model server's (tests/support/model_gateway.py: a hashed bag of words, 256 dimensions).
Their texts are drawn as text is: each chunk is about one of 300 topics, its words come mostly
from that topic's own words and the rest from the whole 5,000-word vocabulary, both with
Zipfian frequencies (a few words common, most rare). Uniformly random words would make every
vector nearly equidistant from every other, which no corpus is. Queries are drawn the same way.
Then, for `--queries` queries:

- vector search through the HNSW index (`DocsStore.vector_candidates`, k = 10, the search's
  ef_search, 400) against the exact scan of the same workspace (`vector_candidates_exact`): p50 /
  p95 and the ratio; target HNSW p50 <= 30 ms;
- HNSW recall@10 against the exact scan's top 10: target >= 0.95 (and at ef_search 100 and 400,
  to show the trade-off);
- the whole hybrid search (`DocsSearch.search`: query embedding over HTTP, HNSW, full text, fusion).

Indexing throughput: a workspace of `--files` Markdown files indexed by `DocsIndexer` (scan,
chunk, embed through the scripted server over HTTP, store), in chunks per second, against the
raw rate of `/v1/embeddings` calls for the same chunk texts in the same batches; once into an
empty chunk table and once beside the loaded chunks (whose HNSW graph each insert then joins).

First, unless `--hovers 0`, the warm LSP hover of bench/eyes_lsp.py (the tool against a bare
pygls client on the same server; target p50 <= 100 ms), so one run prints every figure of the issue.

    .venv/bin/python bench/eyes.py [--chunks 100000] [--queries 200] [--files 200] [--hovers 50]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the scripted model server (tests/support)

from popagent_agent_runner.docs.chunking import chunk_markdown, embedding_text  # noqa: E402
from popagent_agent_runner.docs.indexer import DocsIndexer  # noqa: E402
from popagent_agent_runner.docs.search import CANDIDATES, HNSW_EF_SEARCH, DocsSearch  # noqa: E402
from popagent_agent_runner.docs.store import DocsStore, vector_text  # noqa: E402
from popagent_agent_runner.llm.embeddings import GatewayRetrieval  # noqa: E402
from popagent_agent_runner.service import MIGRATIONS  # noqa: E402
from popagent_agent_runner.service import QUERIES as STATE_QUERIES  # noqa: E402
from popagent_agent_runner.state.workspaces import AgentWorkspaceStore  # noqa: E402
from popagent_core.db import open_pool  # noqa: E402
from popagent_core.migrate import migrate  # noqa: E402
from popagent_dev import embedded  # noqa: E402
from popagent_dev.embedded import ensure_database  # noqa: E402
from support.model_gateway import ModelGateway, text_vector  # noqa: E402

MODEL = "fake/fake-embed"
WORKSPACE = "bench-docs"
K = 10
LOAD_BATCH = 5000
EXACT_SAMPLE = 40
HNSW_INDEX = "popagent_document_chunks_hnsw_256"
LOAD_CHUNKS = """
INSERT INTO popagent_document_chunks
    (document_id, workspace_id, path, ordinal, heading_path, content, model, dims, embedding, search_text)
SELECT d, $1, p, o, ARRAY[h], c, $2, 256, e::vector, setweight(to_tsvector('english', h), 'A') || to_tsvector('english', c)
FROM unnest($3::text[], $4::text[], $5::int[], $6::text[], $7::text[], $8::text[]) AS t(d, p, o, h, c, e)
"""


@contextlib.contextmanager
def server_dsn() -> Iterator[str]:
    configured = os.environ.get("DATABASE_URL")
    if configured:
        yield configured
        return
    with (
        tempfile.TemporaryDirectory(prefix="popagent-bench-eyes-") as folder,
        embedded.postgres(Path(folder) / "pg") as dsn,
    ):
        yield dsn


def quantiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[94]


def sentence(rng: random.Random, vocabulary: list[str], words: int) -> str:
    return " ".join(rng.choice(vocabulary) for _ in range(words))


class Corpus:
    """Topic-mixture text with Zipfian word frequencies (see the module docstring)."""

    TOPICS = 300
    TOPIC_WORDS = 120
    ON_TOPIC = 0.7

    def __init__(self, rng: random.Random, vocabulary: list[str]) -> None:
        self.rng = rng
        self.vocabulary = vocabulary
        self.weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
        self.topics = [rng.sample(vocabulary, self.TOPIC_WORDS) for _ in range(self.TOPICS)]
        self.topic_weights = [1.0 / (rank + 1) for rank in range(self.TOPIC_WORDS)]

    def text(self, words: int, topic: int | None = None) -> str:
        topic = self.rng.randrange(self.TOPICS) if topic is None else topic
        on_topic = sum(self.rng.random() < self.ON_TOPIC for _ in range(words))
        drawn = self.rng.choices(self.topics[topic], self.topic_weights, k=on_topic)
        drawn += self.rng.choices(self.vocabulary, self.weights, k=words - on_topic)
        self.rng.shuffle(drawn)
        return " ".join(drawn)


async def load(pool: asyncpg.Pool, chunks: int, corpus: Corpus) -> float:
    """`chunks` synthetic chunks in 1,000-chunk documents, then the HNSW index built; the build's seconds."""
    per_document = 1000
    async with pool.acquire() as conn:
        await conn.execute(f"DROP INDEX {HNSW_INDEX}")
        for start in range(0, chunks, per_document):
            document_id = f"doc_bench_{start // per_document}"
            await conn.execute(
                "INSERT INTO popagent_documents (id, workspace_id, origin, path, title, content, content_hash)"
                " VALUES ($1, $2, 'api', $3, '', '', '')",
                document_id,
                WORKSPACE,
                f"synthetic/{document_id}.md",
            )
        for start in range(0, chunks, LOAD_BATCH):
            rows = range(start, min(start + LOAD_BATCH, chunks))
            topics = [corpus.rng.randrange(corpus.TOPICS) for _ in rows]
            texts = [corpus.text(corpus.rng.randint(12, 40), topic) for topic in topics]
            headings = [corpus.text(3, topic) for topic in topics]
            await conn.execute(
                LOAD_CHUNKS,
                WORKSPACE,
                MODEL,
                [f"doc_bench_{n // per_document}" for n in rows],
                [f"synthetic/doc_bench_{n // per_document}.md" for n in rows],
                [n % per_document for n in rows],
                headings,
                texts,
                [vector_text(text_vector(f"{h} {t}")) for h, t in zip(headings, texts, strict=True)],
            )
        await conn.execute("SET maintenance_work_mem = '512MB'")
        started = time.perf_counter()
        await conn.execute(
            f"CREATE INDEX {HNSW_INDEX} ON popagent_document_chunks"
            " USING hnsw ((embedding::vector(256)) vector_cosine_ops) WHERE dims = 256"
        )
        built = time.perf_counter() - started
        await conn.execute("ANALYZE popagent_document_chunks")
    return built


async def search_bench(pool: asyncpg.Pool, store: DocsStore, queries: list[str]) -> None:
    vectors = [text_vector(query) for query in queries]
    async with pool.acquire() as conn:
        sql = store.q["vector_candidates"].replace("{dims}", "256")
        async with conn.transaction():
            await conn.fetchval(store.q["set_ef_search"], str(HNSW_EF_SEARCH))
            plan = "\n".join(
                row[0] for row in await conn.fetch(f"EXPLAIN {sql}", WORKSPACE, MODEL, vector_text(vectors[0]), "", K)
            )
    uses_index = HNSW_INDEX in plan
    exact_sql = store.q["vector_candidates_exact"].replace("{dims}", "256")
    hnsw_ms: list[float] = []
    exact_ms: list[float] = []
    truths: list[set[int]] = []
    # An exact scan of 100,000 chunks takes seconds: it runs for the first EXACT_SAMPLE queries only.
    for n, vector in enumerate(vectors):
        started = time.perf_counter()
        await store.vector_candidates(WORKSPACE, MODEL, vector, "", K, HNSW_EF_SEARCH)
        hnsw_ms.append((time.perf_counter() - started) * 1000)
        if n < EXACT_SAMPLE:
            started = time.perf_counter()
            exact = await pool.fetch(exact_sql, WORKSPACE, MODEL, vector_text(vector), "", K)
            exact_ms.append((time.perf_counter() - started) * 1000)
            truths.append({row["id"] for row in exact})
    recall_at: dict[int, tuple[float, float]] = {}
    for ef_search in sorted({100, 200, HNSW_EF_SEARCH, 800}):
        found = []
        took: list[float] = []
        for vector, truth in zip(vectors, truths, strict=False):
            started = time.perf_counter()
            approximate = await store.vector_candidates(WORKSPACE, MODEL, vector, "", K, ef_search)
            took.append((time.perf_counter() - started) * 1000)
            found.append(len(truth & {candidate.chunk_id for candidate in approximate}) / len(truth))
        recall_at[ef_search] = (statistics.fmean(found), statistics.median(took))
    hnsw_p50, hnsw_p95 = quantiles(hnsw_ms)
    exact_p50, exact_p95 = quantiles(exact_ms)
    recall = recall_at[HNSW_EF_SEARCH][0]
    print(f"HNSW index used by the planner: {uses_index}")
    print(f"vector search, k={K}: HNSW p50 {hnsw_p50:.2f} ms p95 {hnsw_p95:.2f} ms (target p50 <= 30 ms)")
    print(f"                exact scan p50 {exact_p50:.2f} ms p95 {exact_p95:.2f} ms ({len(exact_ms)} queries)")
    print(f"                HNSW / exact p50: {hnsw_p50 / exact_p50:.3f} ({exact_p50 / hnsw_p50:.1f}x faster)")
    print(f"HNSW recall@{K} against the exact scan at ef_search {HNSW_EF_SEARCH}: {recall:.4f} (target >= 0.95)")
    print(
        "  by ef_search (recall, p50): "
        + ", ".join(f"{ef}: {value:.4f} {ms:.1f} ms" for ef, (value, ms) in recall_at.items())
    )


async def hybrid_bench(store: DocsStore, retrieval: GatewayRetrieval, queries: list[str]) -> None:
    engine = DocsSearch(store=store, retrieval=retrieval, embedding_model=MODEL)
    samples: list[float] = []
    for query in queries:
        started = time.perf_counter()
        await engine.search(WORKSPACE, query, K)
        samples.append((time.perf_counter() - started) * 1000)
    p50, p95 = quantiles(samples)
    print(f"hybrid search (embed over HTTP + HNSW + full text + fusion): p50 {p50:.2f} ms p95 {p95:.2f} ms")
    text_ms: list[float] = []
    for query in queries:
        started = time.perf_counter()
        await store.text_candidates(WORKSPACE, MODEL, query, "", CANDIDATES)
        text_ms.append((time.perf_counter() - started) * 1000)
    p50, p95 = quantiles(text_ms)
    print(f"  of which the full-text candidates alone: p50 {p50:.2f} ms p95 {p95:.2f} ms")


def write_files(root: Path, files: int, vocabulary: list[str], rng: random.Random) -> None:
    for n in range(files):
        sections = []
        for s in range(4):
            paragraphs = "\n\n".join(sentence(rng, vocabulary, rng.randint(30, 90)) for _ in range(3))
            sections.append(f"## Section {s} {sentence(rng, vocabulary, 2)}\n\n{paragraphs}")
        folder = root / f"part-{n % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"file-{n}.md").write_text(f"# File {n}\n\n" + "\n\n".join(sections) + "\n")


async def indexing_bench(
    pool: asyncpg.Pool,
    store: DocsStore,
    retrieval: GatewayRetrieval,
    root: Path,
    files: int,
    rng: random.Random,
    name: str,
    table: str,
) -> None:
    vocabulary = [f"w{n}" for n in range(2000)]
    write_files(root / name, files, vocabulary, rng)
    workspaces = AgentWorkspaceStore(pool, root, STATE_QUERIES)
    await workspaces.register(name, name, name, "")
    texts = []
    for path in sorted((root / name).rglob("*.md")):
        relative = str(path.relative_to(root / name))
        texts.extend(embedding_text(relative, chunk) for chunk in chunk_markdown(path.read_text()))
    started = time.perf_counter()
    await retrieval.embed(MODEL, texts)
    raw_s = time.perf_counter() - started

    indexer = DocsIndexer(
        store=store, workspaces=workspaces, workspace_root=root, retrieval=retrieval, embedding_model=MODEL
    )
    await store.request_index(name, None, None)
    started = time.perf_counter()
    async with store.run_lock(name):
        await indexer._run_once(name)  # pyright: ignore[reportPrivateUsage] - the run without its background task
    index_s = time.perf_counter() - started
    status = await store.index(name)
    assert status.state == "idle" and status.chunks_embedded == len(texts), status
    raw_rate, index_rate = len(texts) / raw_s, len(texts) / index_s
    print(
        f"indexing {files} files / {len(texts)} chunks into {table}: {index_rate:.0f} chunks/s; raw /v1/embeddings"
        f" calls {raw_rate:.0f} chunks/s; indexing / raw = {index_rate / raw_rate:.2f}"
    )


async def lsp_hover(hovers: int) -> None:
    """bench/eyes_lsp.py's measurement, loaded from beside this file (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("eyes_lsp", Path(__file__).with_name("eyes_lsp.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    await module.main(hovers)


async def main(args: argparse.Namespace) -> None:
    if args.hovers:
        await lsp_hover(args.hovers)
    rng = random.Random(16)
    corpus = Corpus(rng, [f"term{n}" for n in range(5000)])
    with server_dsn() as admin_dsn, tempfile.TemporaryDirectory(prefix="popagent-bench-eyes-ws-") as folder:
        dsn = await ensure_database(admin_dsn, f"popagent_bench_eyes_{os.getpid()}")
        await migrate(dsn, "agent_runner", MIGRATIONS)
        async with (
            open_pool(dsn, "agent_runner", max_size=4) as pool,
            ModelGateway(record=False) as gateway,
            GatewayRetrieval(gateway.url) as retrieval,
        ):
            await pool.execute(
                "INSERT INTO popagent_agent_workspaces (id, name, path, description) VALUES ($1, $1, $1, '')",
                WORKSPACE,
            )
            store = DocsStore(pool)
            await indexing_bench(
                pool, store, retrieval, Path(folder), args.files, rng, "index-empty", "an empty chunk table"
            )
            started = time.perf_counter()
            built = await load(pool, args.chunks, corpus)
            print(f"{args.chunks} chunks loaded in {time.perf_counter() - started:.1f} s (HNSW build {built:.1f} s)")
            queries = [corpus.text(rng.randint(3, 8)) for _ in range(args.queries)]
            await search_bench(pool, store, queries)
            await hybrid_bench(store, retrieval, queries[: max(20, args.queries // 4)])
            await indexing_bench(
                pool, store, retrieval, Path(folder), args.files, rng, "index-full", f"a table of {args.chunks} chunks"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--hovers", type=int, default=50, help="LSP hovers to time (0: skip the LSP part)")
    asyncio.run(main(parser.parse_args()))
