"""The service's state: tables (SQLAlchemy 2), the engine (SQLite WAL by default, PostgreSQL by
URL) and the schema, made and upgraded by Alembic migrations (runner/servers/serve/migrations)."""
from __future__ import annotations

from pathlib import Path

from sqlalchemy import Float, ForeignKey, Integer, String, Text, create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

DB_FILE = "runner.db"


class Base(DeclarativeBase):
    pass


class Tenant(Base):
    __tablename__ = "tenants"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[str] = mapped_column(String(32), unique=True, index=True)
    key_hash: Mapped[str] = mapped_column(String(64))  # sha256 of the whole key, hex
    policies: Mapped[str] = mapped_column(Text)  # JSON {name: source} granted by the operator
    images: Mapped[str] = mapped_column(Text, default="[]")  # JSON [image] granted for /v1/exec
    max_sessions: Mapped[int] = mapped_column(Integer)
    calls_per_minute: Mapped[int] = mapped_column(Integer)
    created: Mapped[float] = mapped_column(Float)


class SessionRow(Base):
    __tablename__ = "sessions"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), ForeignKey("tenants.name", ondelete="CASCADE"), index=True)
    policy: Mapped[str] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(16), index=True)  # open | closed
    reason: Mapped[str] = mapped_column(String(200), default="")
    owner: Mapped[str] = mapped_column(String(200), default="")  # the serve instance holding its Runner
    created: Mapped[float] = mapped_column(Float)
    last_used: Mapped[float] = mapped_column(Float)
    closed_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    sandbox: Mapped[str | None] = mapped_column(String(16), nullable=True)  # SANDBOXES; None: as its policy says
    calls: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # calls so far: the next id's number


class Usage(Base):
    """Calls of a tenant in one minute (a fixed window shared by every instance)."""
    __tablename__ = "usage"
    tenant: Mapped[str] = mapped_column(String(64), ForeignKey("tenants.name", ondelete="CASCADE"), primary_key=True)
    window: Mapped[int] = mapped_column(Integer, primary_key=True)
    count: Mapped[int] = mapped_column(Integer, default=0)


def data_dir(data: str | None) -> Path:
    """--data, else $RUNNER_DATA, else ~/.local/share/runner (one rule: the controller's snapshots use it too)."""
    from ...controller.snapshots import data_root

    return data_root(data)


def database_url(data: str | None, db: str | None, create: bool = True) -> str:
    """--db, else the SQLite file in the data directory; create=False (a command that only reads
    or changes what is there): UsageError when that file does not exist, and nothing is made."""
    if db:
        return db
    d = data_dir(data)
    if not create:
        if not (d / DB_FILE).is_file():
            from ...errors import UsageError

            raise UsageError(f"no database at {d / DB_FILE}: no tenants there (give the server's --data DIR or "
                             "--db URL; `runner tenants add` makes one)")
        return f"sqlite:///{d / DB_FILE}"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return f"sqlite:///{d / DB_FILE}"


def _driver(url: str) -> str:
    """postgresql:// means psycopg (3), the driver the extra installs, unless one is named."""
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain):]
    return url


def make_engine(url: str) -> Engine:
    url = _driver(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _pragmas(conn, _record):
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")  # durable in WAL mode; a commit is no fsync
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest migration (idempotent)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":  # instances starting together migrate one at a time
            from sqlalchemy import text

            conn.execute(text("SELECT pg_advisory_xact_lock(7013)"))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


class Database:
    """An engine whose schema is current, and sessions on it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        migrate(self.engine)
        self.session = sessionmaker(self.engine, expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()


def open_db(data: str | None, db: str | None, create: bool = True) -> Database:
    return Database(database_url(data, db, create))
