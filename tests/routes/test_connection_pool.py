"""No request holds a pooled connection while it waits for the model or for a second connection, and a
database that is out of connections, shutting down or unreachable answers 503 with Retry-After (and the
message id, when the message is stored), never a bare 500.

Every app here runs on a one-connection pool (DB_POOL_SIZE=1, DB_MAX_OVERFLOW=0) with the rate limits
counted in the database, as `make serve` counts them: the shape that deadlocked."""
from __future__ import annotations

import socket
import threading

import psycopg
import pytest
from sqlalchemy import event, func, select

from config import Settings
from database.db_manager import Database, is_unavailable
from database.models import Message
from services.llm.chain import LLMService
from services.llm.types import ChatRequest, ChatResult
from tests.conftest import ApiClient
from tests.model_doubles import DownModel
from tests.routes.test_chat import sse_events

pytestmark = pytest.mark.postgres


@pytest.fixture
def one_connection(monkeypatch):
    monkeypatch.setenv("DB_POOL_SIZE", "1")
    monkeypatch.setenv("DB_MAX_OVERFLOW", "0")
    monkeypatch.setenv("DB_POOL_TIMEOUT", "2")


def _settings(database_url: str) -> Settings:
    return Settings.from_env(database_url=database_url, secret_key="pool-test", testing=True,
                             scheduler_enabled=False, consolidate_inline=True, assignment_seed=1234,
                             llm_providers=["offline"], embedding_provider="offline",
                             rate_limits_enabled=True, rate_limit_storage="database")


@pytest.fixture
def pool_app(one_connection, database, clock):
    from app import create_app

    app = create_app(_settings(database.url), clock=clock)
    yield app
    runtime = app.extensions["memory_lab"]
    runtime.background.shutdown()
    runtime.record_failure.flush()
    runtime.db.dispose()


def _participant(app, clock, name="pooled") -> ApiClient:
    api = ApiClient(app.test_client())
    assert api.register(name).status_code == 201
    assert api.post("/api/tasks/T1/start").status_code == 201
    clock.advance(5)
    return api


def _messages(app, role: str) -> int:
    with app.extensions["memory_lab"].db.Session() as session:
        return session.scalar(select(func.count(Message.id)).where(Message.role == role))


def test_a_one_connection_pool_answers_a_message_a_retry_and_a_stream(pool_app, clock):
    assert pool_app.extensions["memory_lab"].db.engine.pool.size() == 1
    api = _participant(pool_app, clock)
    answered = api.post("/api/tasks/T1/messages", json={"content": "我周末去爬山了。"})
    assert answered.status_code == 201, answered.get_json()
    assert answered.headers["X-RateLimit-Remaining"]  # the limiter counted it in the database

    clock.advance(5)
    events = sse_events(api.post("/api/tasks/T1/messages?stream=1", json={"content": "山上很冷。"}))
    assert [name for name, _ in events][0] == "message" and events[-1][0] == "reply"


class _ModelThatTakesThePool:
    """Answers, but while it answers something else takes the pool's only connection (and keeps it)."""

    name = "pool-taker"
    model = "pool-taker-1"

    def __init__(self, engine) -> None:
        self.engine = engine
        self.held = None

    def complete(self, request: ChatRequest) -> ChatResult:
        self.held = self.engine.connect()
        self.held.execute(select(1))
        return ChatResult(text="好的。", provider=self.name, model=self.model)

    def stream(self, request: ChatRequest):
        yield self.complete(request).text

    def give_back(self) -> None:
        if self.held is not None:
            self.held.close()
            self.held = None


def test_the_retry_route_answers_on_a_one_connection_pool(pool_app, clock):
    runtime = pool_app.extensions["memory_lab"]
    api = _participant(pool_app, clock)
    real_llm = runtime.llm
    runtime.llm = LLMService([DownModel()], on_failure=runtime.record_failure)
    refused = api.post("/api/tasks/T1/messages", json={"content": "你记得我吗？"})
    assert refused.status_code == 503 and refused.headers["Retry-After"]
    message_id = refused.get_json()["details"]["message_id"]
    runtime.llm = real_llm
    again = api.post(f"/api/tasks/T1/messages/{message_id}/reply")
    assert again.status_code == 201, again.get_json()
    assert again.get_json()["reply"]["reply_to_id"] == message_id
    runtime.llm = LLMService([DownModel()], on_failure=runtime.record_failure)
    clock.advance(5)
    second = api.post("/api/tasks/T1/messages", json={"content": "还在吗？"}).get_json()["details"]["message_id"]
    runtime.llm = real_llm
    events = sse_events(api.post(f"/api/tasks/T1/messages/{second}/reply?stream=1"))
    assert events[-1][0] == "reply" and events[-1][1]["reply_to_id"] == second


def test_a_pool_timeout_after_the_message_is_stored_answers_503_with_its_id(pool_app, clock):
    runtime = pool_app.extensions["memory_lab"]
    api = _participant(pool_app, clock)
    taker = _ModelThatTakesThePool(runtime.db.engine)
    runtime.llm = LLMService([taker], on_failure=runtime.record_failure)
    try:
        response = api.post("/api/tasks/T1/messages", json={"content": "今天好累。"})
    finally:
        taker.give_back()
    assert response.status_code == 503
    body = response.get_json()
    assert body["error"] == "reply_not_saved" and response.headers["Retry-After"]
    assert _messages(pool_app, "user") == 1 and _messages(pool_app, "assistant") == 0
    assert body["details"]["message_id"]

    clock.advance(5)
    try:
        events = sse_events(api.post("/api/tasks/T1/messages?stream=1", json={"content": "还是很累。"}))
    finally:
        taker.give_back()
    assert [name for name, _ in events] == ["message", "delta", "error"]
    assert events[-1][1]["error"] == "reply_not_saved" and events[-1][1]["message_id"] == events[0][1]["id"]


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens on it once closed


def test_an_unreachable_database_answers_503_with_retry_after(one_connection, clock):
    from app import create_app

    url = f"postgresql+psycopg://nobody@127.0.0.1:{_refused_port()}/nothing"
    app = create_app(_settings(url), clock=clock)
    try:
        response = ApiClient(app.test_client()).login("someone", "a-password-1")
    finally:
        app.extensions["memory_lab"].background.shutdown()
        app.extensions["memory_lab"].db.dispose()
    assert response.status_code == 503, response.get_data(as_text=True)[:300]
    assert response.get_json()["error"] == "database_busy" and response.headers["Retry-After"]


def test_connection_refused_and_pool_timeouts_are_retryable():
    refused = Database(f"postgresql+psycopg://nobody@127.0.0.1:{_refused_port()}/nothing")
    with pytest.raises(Exception) as caught:
        with refused.engine.connect():
            pass
    assert is_unavailable(caught.value)
    refused.dispose()


def test_a_backend_terminated_mid_reply_answers_503_with_the_message_id(pool_app, clock, database):
    """PostgreSQL's admin shutdown (57P01) between the model's answer and storing the reply."""
    if not database.url.startswith("postgresql"):
        pytest.skip("pg_terminate_backend is PostgreSQL's")
    runtime = pool_app.extensions["memory_lab"]
    api = _participant(pool_app, clock)
    armed = threading.Event()

    class AnswersThenArms:
        name, model = "arming", "arming-1"

        def complete(self, request):
            armed.set()
            return ChatResult(text="嗯。", provider=self.name, model=self.model)

        def stream(self, request):
            yield self.complete(request).text

    def terminate_this_backend(conn, cursor, statement, parameters, context, executemany):
        if armed.is_set() and statement.lstrip().upper().startswith("INSERT"):
            armed.clear()
            pid = conn.connection.dbapi_connection.info.backend_pid
            with psycopg.connect(database.url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))

    runtime.llm = LLMService([AnswersThenArms()], on_failure=runtime.record_failure)
    event.listen(runtime.db.engine, "before_cursor_execute", terminate_this_backend)
    try:
        response = api.post("/api/tasks/T1/messages", json={"content": "服务器重启了吗？"})
    finally:
        event.remove(runtime.db.engine, "before_cursor_execute", terminate_this_backend)
    assert response.status_code == 503, response.get_json()
    assert response.get_json()["details"]["message_id"] and response.headers["Retry-After"]
    assert _messages(pool_app, "user") == 1


def _pooled_backend_pid(db) -> int:
    """The server process behind the one-connection pool's connection (checked out and back in)."""
    with db.engine.connect() as conn:
        return conn.connection.dbapi_connection.info.backend_pid


def _terminate(database_url: str, pid: int) -> None:
    with psycopg.connect(database_url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone()[0]


def test_a_connection_the_server_closed_while_idle_is_replaced_without_an_error(pool_app, clock, database):
    """A pooled connection idle longer than ``idle_ping_seconds`` is pinged at check-out; the server closed
    it (an idle timeout, a restart), so the pool replaces it and the participant's next request succeeds."""
    if not database.url.startswith("postgresql"):
        pytest.skip("pg_terminate_backend is PostgreSQL's")
    db = pool_app.extensions["memory_lab"].db
    api = _participant(pool_app, clock)
    first = _pooled_backend_pid(db)
    _terminate(database.url, first)
    db.idle_ping_seconds = 0.0  # every connection back in the pool counts as idle
    clock.advance(5)
    response = api.post("/api/tasks/T1/messages", json={"content": "我回来了。"})
    assert response.status_code == 201, response.get_json()
    assert _pooled_backend_pid(db) != first
    assert _messages(pool_app, "assistant") == 1


def test_a_connection_closed_moments_after_its_last_use_costs_one_retryable_503(pool_app, clock, database):
    """The trade-off of pinging idle connections only: a connection the server closed within
    ``idle_ping_seconds`` of its last use is not pinged, so the request that takes it answers 503 with
    Retry-After (nothing stored half), SQLAlchemy invalidates the pool, and the next request reconnects."""
    if not database.url.startswith("postgresql"):
        pytest.skip("pg_terminate_backend is PostgreSQL's")
    db = pool_app.extensions["memory_lab"].db
    api = _participant(pool_app, clock)
    _terminate(database.url, _pooled_backend_pid(db))
    db.idle_ping_seconds = 3600.0
    clock.advance(5)
    refused = api.post("/api/tasks/T1/messages", json={"content": "服务器重启了。"})
    assert refused.status_code == 503 and refused.headers["Retry-After"], refused.get_data(as_text=True)[:300]
    clock.advance(5)
    again = api.post("/api/tasks/T1/messages", json={"content": "服务器重启了。"})
    assert again.status_code == 201, again.get_json()
    assert _messages(pool_app, "user") == 1 and _messages(pool_app, "assistant") == 1


def test_a_busy_pool_is_not_pinged(pool_app, clock, database, monkeypatch):
    """Connections back in the pool moments ago go out again without a ping (``pool_pre_ping`` sent a
    ``SELECT 1`` at every check-out); one idle longer than ``idle_ping_seconds`` is pinged."""
    if not database.url.startswith("postgresql"):
        pytest.skip("the ping is for server connections")
    db = pool_app.extensions["memory_lab"].db
    dialect = db.engine.dialect
    pings = []
    real_ping = dialect.do_ping
    monkeypatch.setattr(dialect, "do_ping", lambda dbapi_connection: pings.append(1) or real_ping(dbapi_connection))
    api = _participant(pool_app, clock)
    for text in ("今天下雨了。", "我没带伞。"):
        clock.advance(5)
        assert api.post("/api/tasks/T1/messages", json={"content": text}).status_code == 201
    clock.advance(5)
    assert sse_events(api.post("/api/tasks/T1/messages?stream=1", json={"content": "衣服湿了。"}))[-1][0] == "reply"
    assert pings == []
    db.idle_ping_seconds = 0.0
    clock.advance(5)
    assert api.post("/api/tasks/T1/messages", json={"content": "还好回家了。"}).status_code == 201
    assert pings  # the same check-outs, now counted as idle, are pinged
