"""Shared helpers for the scripts in bench/: a fresh throw-away database, Django set-up,
timing statistics, machine information, Markdown tables and a deterministic generator of
mixed English/Chinese chat messages.

Every benchmark builds its own database (a temporary SQLite file, or a temporary database
on the PostgreSQL server named by a URL) so it never touches real data.
"""

import contextlib
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

PROJECT_ROOT = Path(__file__).resolve().parent.parent


# --- Database and Django ----------------------------------------------------------------


@contextlib.contextmanager
def temporary_database(database_url: str | None = None, *, label: str = "bench") -> Iterator[str]:
    """Yield the URL of a fresh, empty database; remove it afterwards.

    No URL (or a sqlite:// URL): a new SQLite file in the temp directory.
    A postgres:// URL names a server (its database part is only used to connect): a
    database `hermes_<label>_<pid>` is created there and dropped at the end.
    """
    if not database_url or database_url.startswith("sqlite"):
        with tempfile.TemporaryDirectory(prefix=f"hermes-{label}-") as directory:
            yield f"sqlite:///{Path(directory) / 'bench.sqlite3'}"
        return
    if not database_url.startswith(("postgres://", "postgresql://")):
        raise SystemExit(f"unsupported database URL: {database_url}")
    import psycopg

    name = f"hermes_{label}_{os.getpid()}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(database_url)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        close_django_connections()
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def setup_django(database_url: str) -> None:
    """Configure and start Django for `database_url` (call once, before importing models)."""
    if str(PROJECT_ROOT) not in sys.path:
        sys.path.insert(0, str(PROJECT_ROOT))
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_site.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def close_django_connections() -> None:
    if "django.db" in sys.modules:
        from django.db import connections

        connections.close_all()


def database_description() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT sqlite_version()")
            return f"SQLite {cursor.fetchone()[0]} (WAL)"
        if connection.vendor == "postgresql":
            cursor.execute("SHOW server_version")
            return f"PostgreSQL {cursor.fetchone()[0]}"
    return connection.vendor


# --- Timing -----------------------------------------------------------------------------


def time_ms(function: Callable[[], object]) -> float:
    """Milliseconds one call of `function` takes (wall clock, perf_counter)."""
    started = time.perf_counter()
    function()
    return (time.perf_counter() - started) * 1000


def timings_ms(function: Callable[[], object], *, runs: int, warmup: int = 1) -> list[float]:
    """Call `function` `warmup` times untimed, then `runs` times; return each run in ms."""
    for _ in range(warmup):
        function()
    return [time_ms(function) for _ in range(runs)]


def percentile(values: Sequence[float], percent: float) -> float:
    """The `percent` percentile with linear interpolation (50 → the median)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * percent / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


# --- Reporting --------------------------------------------------------------------------


def machine_info() -> dict[str, str]:
    """CPU model and cores (from /proc/cpuinfo when present), OS, Python, load average."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        load = "?"
    return {
        "CPU": cpu,
        "cores": str(os.cpu_count() or "?"),
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "load average": load,
    }


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table; numbers right-aligned."""

    def cell(value: object) -> str:
        if isinstance(value, float):
            return f"{value:.2f}"
        return str(value).replace("|", "\\|")

    numeric = [
        bool(rows) and all(isinstance(row[i], int | float) for row in rows)
        for i in range(len(headers))
    ]
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---:" if is_number else "---" for is_number in numeric) + "|",
    ]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


# --- Message generator ------------------------------------------------------------------


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


ENGLISH_COMMON = _words(
    "the to and a of is in it you that for on we this be with have are not can do if "
    "just so but what about when will should now get like think need make see it's"
)

ENGLISH_TOPICAL = _words(
    "deploy deployment server database migration release build test tests pipeline "
    "docker container cluster latency cache queue worker timeout retry error logs "
    "backup restore config token budget prompt memory skill review schedule meeting "
    "invoice customer report dashboard search index query schema branch merge commit "
    "rollback incident alert metrics storage bucket network proxy certificate password "
    "login session webhook telegram browser mobile design draft summary agenda roadmap "
    "feature bug patch upgrade python django postgres sqlite redis celery frontend backend"
)

ENGLISH_RARE = _words(
    "zeppelin quasar marmalade obsidian fjord kaleidoscope xylophone tamarind narwhal sassafras"
)

CHINESE_COMMON = _words("的 了 是 我 你 在 有 就 不 也 和 这 吗 吧 都")

CHINESE_TOPICAL = _words(
    "部署 服务器 数据库 迁移 发布 测试 流水线 容器 集群 延迟 缓存 队列 超时 重试 错误 "
    "日志 备份 恢复 配置 预算 提示词 记忆 长期记忆 技能 评审 会议 发票 客户 报告 仪表盘 "
    "搜索 索引 查询 分支 合并 提交 回滚 事故 告警 指标 存储 网络 代理 证书 密码 登录 "
    "会话 浏览器 设计 草稿 摘要 议程 路线图 功能 升级 管理 团队 项目 用户 问题 方案"
)

CHINESE_RARE = _words("麒麟 琵琶 饕餮 鸳鸯 蝴蝶效应")


def _zipf_weights(count: int) -> list[float]:
    """Cumulative weights 1, 1/2, 1/3... for random.choices."""
    total, cumulative = 0.0, []
    for rank in range(1, count + 1):
        total += 1 / rank
        cumulative.append(total)
    return cumulative


class MessageTextGenerator:
    """Deterministic chat-like texts: English, Chinese, or both in one message.

    Word frequencies are skewed (common function words, topical words, a few rare words),
    so benchmarks can query a very common term, ordinary terms and rare ones.
    """

    def __init__(self, seed: int = 42, *, rare_probability: float = 0.002):
        self.random = random.Random(seed)
        self.rare_probability = rare_probability
        # Zipf-like: the first function word ("the", "的") is by far the most frequent.
        self._english_common_weights = _zipf_weights(len(ENGLISH_COMMON))
        self._chinese_common_weights = _zipf_weights(len(CHINESE_COMMON))

    def _english_word(self) -> str:
        roll = self.random.random()
        if roll < self.rare_probability:
            return self.random.choice(ENGLISH_RARE)
        if roll < 0.5:
            return self.random.choices(ENGLISH_COMMON, cum_weights=self._english_common_weights)[0]
        word = self.random.choice(ENGLISH_TOPICAL)
        return word.capitalize() if self.random.random() < 0.1 else word

    def _chinese_word(self) -> str:
        roll = self.random.random()
        if roll < self.rare_probability:
            return self.random.choice(CHINESE_RARE)
        if roll < 0.4:
            return self.random.choices(CHINESE_COMMON, cum_weights=self._chinese_common_weights)[0]
        return self.random.choice(CHINESE_TOPICAL)

    def _english_sentence(self) -> str:
        words = [self._english_word() for _ in range(self.random.randint(4, 16))]
        words[0] = words[0].capitalize()
        return " ".join(words) + self.random.choice(".?!.")

    def _chinese_sentence(self) -> str:
        words = [self._chinese_word() for _ in range(self.random.randint(4, 14))]
        return "".join(words) + self.random.choice("。？！。")

    def text(self) -> str:
        """One message: 1-3 sentences, ~45% English, ~35% Chinese, ~20% mixed."""
        roll = self.random.random()
        sentences = []
        for _ in range(self.random.randint(1, 3)):
            if roll < 0.45:
                sentences.append(self._english_sentence())
            elif roll < 0.8:
                sentences.append(self._chinese_sentence())
            else:
                sentences.append(
                    self._english_sentence()
                    if self.random.random() < 0.5
                    else self._chinese_sentence()
                )
        return " ".join(sentences)

    def texts(self, count: int) -> Iterator[str]:
        for _ in range(count):
            yield self.text()


def batched(items: Sequence, size: int) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
