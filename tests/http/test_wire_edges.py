"""What is checked before anything is sent (issue 14, item 5, backend side), proxies (item 8)
and certificates, for every shipped backend: the real backends' `check_params`,
`check_environment` and `open`, the real SDKs through fragbench's transport, servers and
proxies on raw sockets (`wire_servers`), TLS with a certificate made for the test.

- An endpoint from the environment (OPENAI_BASE_URL, ANTHROPIC_BASE_URL) goes through the
  checks a config's base_url does; a key with a line break, a space, a control or a non-ASCII
  character inside is refused; `timeout_seconds = inf` or `1e12` and absurd token limits are
  refused when the config is loaded: one line each, naming the variable or parameter, never
  the value of a key, nothing sent.
- The environment's proxy variables are never read; a proxy the config names is used (http
  endpoints in absolute form, https ones through CONNECT) and named; socks or malformed proxies
  are refused by check_params.
- Certificates as httpx2 verifies them, SSL_CERT_FILE honoured; one that does not exist is
  refused at open, naming the variable and the file; a certificate not trusted is a failure
  that proves nothing was sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fragbench_anthropic import AnthropicBackend
from fragbench_openai_chat import OpenAIChatBackend
from support.cli import error_lines, run_cli
from support.wire_servers import (
    ForwardingProxy,
    Listener,
    RawServer,
    certificate,
    http_response,
    responses_answer,
    server_tls,
)

from fragbench.builtin.openai_backend import OpenAIBackend
from fragbench.errors import FragbenchError
from fragbench.interfaces import BackendFailure
from fragbench.testing import samples
from fragbench.testing.loopback import Server

pytestmark = pytest.mark.slow

KEY = "sk-proj-EDGEedge0123456789abcdefXYZ"
REQUEST = samples.calls()[0].request

BACKENDS: dict[str, tuple[Any, dict[str, Any], str, str, str]] = {
    # name: (backend, params, key variable, URL variable, what base_url ends with)
    "openai": (OpenAIBackend(), {"model": "gpt-6-astra", "reasoning_effort": "medium",
                                 "max_output_tokens": 1200, "service_tier": "default",
                                 "store": False, "timeout_seconds": 30},
               "OPENAI_API_KEY", "OPENAI_BASE_URL", "/v1"),
    "openai-chat": (OpenAIChatBackend(), {"model": "gpt-6-astra", "max_tokens": 1200,
                                          "timeout_seconds": 30},
                    "OPENAI_API_KEY", "OPENAI_BASE_URL", "/v1"),
    "anthropic": (AnthropicBackend(), {"model": "claude-haiku-4-5", "max_tokens": 1200,
                                       "timeout_seconds": 30},
                  "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", ""),
}
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                   "all_proxy")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*PROXY_VARIABLES, "SSL_CERT_FILE", "SSL_CERT_DIR", "OPENAI_BASE_URL",
                 "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def listener() -> Iterator[Listener]:
    with Listener() as found:
        yield found


def refused(call: Any) -> str:
    with pytest.raises(FragbenchError) as raised:
        call()
    line = str(raised.value)
    assert "\n" not in line and "nothing was sent" in line, line
    return line


# -- Item 5: nothing leaves the machine, and nothing is spent, for a mistyped environment -------

BAD_URLS = {
    "query": ("http://127.0.0.1:{port}/v1?api-version=2024", "query"),
    "user-info": ("http://someone:hunter2pass@127.0.0.1:{port}/v1", "password"),
    "fragment": ("http://127.0.0.1:{port}/v1#x", "fragment"),
    "no scheme": ("127.0.0.1:{port}/v1", "is not an http:// or https:// URL"),
    "other scheme": ("ftp://127.0.0.1:{port}/v1", "is not an http:// or https:// URL"),
    "bad port": ("http://127.0.0.1:70000/v1", "invalid port"),
    "port zero": ("http://127.0.0.1:0/v1", "invalid port"),
    "no host": ("http:///v1", "is not an http:// or https:// URL"),
}


@pytest.mark.parametrize("bad", list(BAD_URLS))
@pytest.mark.parametrize("name", list(BACKENDS))
def test_an_endpoint_variable_goes_through_the_base_url_checks(
        monkeypatch: pytest.MonkeyPatch, listener: Listener, name: str, bad: str) -> None:
    backend, params, key_env, url_env, _ = BACKENDS[name]
    url, said = BAD_URLS[bad]
    monkeypatch.setenv(key_env, KEY)
    monkeypatch.setenv(url_env, url.format(port=listener.port))
    for call in (lambda: backend.check_environment(dict(params)),
                 lambda: backend.open(dict(params))):
        line = refused(call)
        assert line.startswith(url_env) and said in line and "hunter2pass" not in line, line
    assert listener.connections == 0


@pytest.mark.parametrize(("key", "what"), [
    ("sk-proj-abc123\ndef456ghi789", "a line break inside"),
    ("sk-proj-abc123 def456ghi789", "a space inside"),
    ("sk-proj-abc123\tdef456ghi789", "a tab inside"),
    ("sk-proj-abc123\x1bdef456ghi789", "an escape character inside"),
    ("sk-proj-abc123\u200bdef456ghi789", "a zero-width space inside"),
    ("sk-proj-abcé123def456ghi789", "a non-ASCII character"),
])
@pytest.mark.parametrize("name", list(BACKENDS))
def test_a_key_of_the_wrong_shape_is_refused_without_showing_it(
        monkeypatch: pytest.MonkeyPatch, listener: Listener, name: str, key: str, what: str
) -> None:
    backend, params, key_env, url_env, suffix = BACKENDS[name]
    monkeypatch.setenv(key_env, key)
    monkeypatch.setenv(url_env, f"http://127.0.0.1:{listener.port}{suffix}")
    for call in (lambda: backend.check_environment(dict(params)),
                 lambda: backend.open(dict(params))):
        line = refused(call)
        assert line.startswith(f"{key_env} holds a space, a line break"), line
        assert "abc123" not in line and "def456" not in line
    assert listener.connections == 0


def test_a_key_with_a_line_break_is_refused_before_the_series_exists(experiment: Path,
                                                                    server: Server) -> None:
    result = run_cli("run", str(experiment), "--series", "openai", "--backend", "openai",
                     "--out", str(experiment.parent.parent / "outputs"),
                     env={"OPENAI_API_KEY": "sk-proj-abc123\ndef456ghi789",
                          "OPENAI_BASE_URL": server.base_url})
    assert result.returncode == 4
    (line,) = error_lines(result.stderr)
    assert line.startswith("fragbench: OPENAI_API_KEY holds a space, a line break")
    assert "abc123" not in result.stderr and len(server.requests) == 0
    assert not (experiment.parent.parent / "outputs" / "protocol-1.0" / "openai").exists()


@pytest.mark.parametrize(("change", "said"), [
    ({"timeout_seconds": float("inf")}, "timeout_seconds must be a finite number"),
    ({"timeout_seconds": float("nan")}, "timeout_seconds must be a finite number"),
    ({"timeout_seconds": 1e12}, "timeout_seconds must be at most 3600"),
    ({"timeout_seconds": 3601}, "timeout_seconds must be at most 3600"),
    ({"limit": 10**12}, "must be at most 1e+06"),
    ({"proxy": "socks5://127.0.0.1:1080"}, "socks proxies are not supported"),
    ({"proxy": "socks5h://127.0.0.1:1080"}, "socks proxies are not supported"),
    ({"proxy": "127.0.0.1:3128"}, "proxy must be an http:// URL"),
    ({"proxy": "https://127.0.0.1:3128"}, "proxy must be an http:// URL"),
    ({"proxy": "http://user:hunter2pass@127.0.0.1:3128"}, "no user name, password"),
    ({"proxy": "http://127.0.0.1:3128/path?x=1"}, "no user name, password, path, query"),
    ({"proxy": "http://127.0.0.1:99999"}, "invalid port"),
    ({"proxy": "http://"}, "proxy must be an http:// URL"),
])
@pytest.mark.parametrize("name", list(BACKENDS))
def test_unusable_numbers_and_proxies_are_refused_by_check_params(
        name: str, change: dict[str, Any], said: str) -> None:
    backend, params, *_ = BACKENDS[name]
    limit = "max_output_tokens" if name == "openai" else "max_tokens"
    given = {**params, **{limit if k == "limit" else k: v for k, v in change.items()}}
    backend.check_params(dict(params))  # the unchanged parameters pass
    with pytest.raises(ValueError, match=None) as raised:
        backend.check_params(given)
    assert said in str(raised.value) and "hunter2pass" not in str(raised.value)


@pytest.mark.parametrize(("old", "new", "said"), [
    ("timeout_seconds = 600", "timeout_seconds = inf", "timeout_seconds must be a finite"),
    ("timeout_seconds = 600", "timeout_seconds = 1e12", "timeout_seconds must be at most 3600"),
    ("max_output_tokens = 1200", "max_output_tokens = 1000000000000", "must be at most 1e+06"),
    ("timeout_seconds = 600", 'timeout_seconds = 600\nproxy = "socks5://127.0.0.1:1080"',
     "socks proxies are not supported"),
])
def test_freeze_and_plan_refuse_them_in_one_line(experiment: Path, old: str, new: str,
                                                 said: str) -> None:
    config = experiment / "config.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")
    for command in ("freeze", "plan"):
        result = run_cli(command, str(experiment))
        assert result.returncode == 4, result.stderr
        (line,) = error_lines(result.stderr)
        assert "config.toml" in line and said in line, line


@pytest.mark.parametrize("name", list(BACKENDS))
def test_check_environment_says_where_calls_go_and_sends_nothing(
        monkeypatch: pytest.MonkeyPatch, listener: Listener, name: str) -> None:
    backend, params, key_env, url_env, suffix = BACKENDS[name]
    monkeypatch.setenv(key_env, KEY)
    monkeypatch.setenv(url_env, f"http://127.0.0.1:{listener.port}{suffix}")
    said = backend.check_environment({**params, "proxy": "http://127.0.0.1:3128"})
    assert said == (f"http://127.0.0.1:{listener.port}{suffix} through the proxy "
                    f"http://127.0.0.1:3128 (key from {key_env})")
    monkeypatch.delenv(key_env)
    assert "is not set" in refused(lambda: backend.check_environment(dict(params)))
    assert listener.connections == 0


# -- Item 8: proxies -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(BACKENDS))
def test_the_environments_proxy_variables_are_never_used(
        monkeypatch: pytest.MonkeyPatch, listener: Listener, name: str) -> None:
    backend, params, key_env, url_env, _ = BACKENDS[name]
    api = {"openai": "responses", "openai-chat": "chat", "anthropic": "messages"}[name]
    for variable in PROXY_VARIABLES:
        monkeypatch.setenv(variable, f"http://127.0.0.1:{listener.port}")
    monkeypatch.setenv("NO_PROXY", "")
    with Server(api) as server:
        monkeypatch.setenv(key_env, KEY)
        monkeypatch.setenv(url_env, server.base_url)
        session = backend.open(dict(params))
        try:
            reply = session.send(REQUEST)
        finally:
            session.close()
        assert session.proxy is None and len(server.requests) == 1
    assert reply.status == "completed" and listener.connections == 0


@pytest.mark.parametrize("name", list(BACKENDS))
def test_a_configured_proxy_carries_an_http_endpoint_in_absolute_form(
        monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    backend, params, key_env, url_env, _ = BACKENDS[name]
    api = {"openai": "responses", "openai-chat": "chat", "anthropic": "messages"}[name]
    with Server(api) as server, ForwardingProxy() as proxy:
        monkeypatch.setenv(key_env, KEY)
        monkeypatch.setenv(url_env, server.base_url)
        session = backend.open({**params, "proxy": proxy.url})
        try:
            reply = session.send(REQUEST)
        finally:
            session.close()
        assert session.proxy == proxy.url and reply.status == "completed"
        assert proxy.asked == [("POST", server.origin + server.shape.path)]
        assert len(server.requests) == 1


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return certificate(tmp_path_factory.mktemp("tls"))


def tls_server(files: tuple[Path, Path]) -> RawServer:
    return RawServer(responses_answer, tls=server_tls(*files))


def open_https(monkeypatch: pytest.MonkeyPatch, server: RawServer, **params: Any) -> Any:
    backend, base, *_ = BACKENDS["openai"]
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"https://localhost:{server.port}/v1")
    return backend.open({**base, **params})


def test_an_https_endpoint_is_verified_with_ssl_cert_file(
        monkeypatch: pytest.MonkeyPatch, tls_files: tuple[Path, Path]) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files[0]))
    with tls_server(tls_files) as server:
        session = open_https(monkeypatch, server)
        reply = session.send(REQUEST)
        session.close()
    assert reply.status == "completed" and len(server.requests) == 1


def test_an_https_endpoint_goes_through_the_configured_proxys_tunnel(
        monkeypatch: pytest.MonkeyPatch, tls_files: tuple[Path, Path]) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files[0]))
    with tls_server(tls_files) as server, ForwardingProxy() as proxy:
        session = open_https(monkeypatch, server, proxy=proxy.url)
        reply = session.send(REQUEST)
        session.close()
    assert reply.status == "completed" and len(server.requests) == 1
    assert proxy.asked == [("CONNECT", f"localhost:{server.port}")]  # the key went inside TLS


def test_a_certificate_not_trusted_proves_nothing_was_sent(
        monkeypatch: pytest.MonkeyPatch, tls_files: tuple[Path, Path]) -> None:
    with tls_server(tls_files) as server:  # SSL_CERT_FILE unset: the system's roots only
        session = open_https(monkeypatch, server)
        with pytest.raises(BackendFailure) as failed:
            session.send(REQUEST)
        session.close()
    assert failed.value.kind == "connection" and failed.value.never_sent
    assert "never left this machine" in failed.value.message
    assert server.requests == []


def test_a_proxy_that_refuses_the_tunnel_proves_nothing_was_sent(
        monkeypatch: pytest.MonkeyPatch, tls_files: tuple[Path, Path]) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files[0]))
    with RawServer(lambda n, req: (http_response(b"", status="403 Forbidden"), False)
                   ) as proxy, tls_server(tls_files) as server:
        session = open_https(monkeypatch, server, proxy=proxy.origin)
        with pytest.raises(BackendFailure) as failed:
            session.send(REQUEST)
        session.close()
    assert failed.value.never_sent and "refused the tunnel" in failed.value.message
    assert [r["method"] for r in proxy.requests] == ["CONNECT"] and server.requests == []


@pytest.mark.parametrize(("variable", "what"), [("SSL_CERT_FILE", "file"),
                                                ("SSL_CERT_DIR", "folder")])
@pytest.mark.parametrize("name", list(BACKENDS))
def test_a_certificate_variable_naming_nothing_refuses_the_session(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, listener: Listener, name: str,
        variable: str, what: str) -> None:
    backend, params, key_env, url_env, suffix = BACKENDS[name]
    missing = tmp_path / "no-such-certificates.pem"
    monkeypatch.setenv(variable, str(missing))
    monkeypatch.setenv(key_env, KEY)
    monkeypatch.setenv(url_env, f"https://127.0.0.1:{listener.port}{suffix}")
    for call in (lambda: backend.check_environment(dict(params)),
                 lambda: backend.open(dict(params))):
        line = refused(call)
        assert line.startswith(f"{variable} is set to {missing}, which is not an existing "
                               f"{what}"), line
    assert listener.connections == 0


def test_an_unknown_backend_parameter_is_named_with_the_nearest_known_one() -> None:
    """Issue 14, item 10: a typo in a backend's parameters is refused, naming the parameter
    it probably meant (not silently dropped, not a bare list)."""
    from fragbench.builtin.openai_backend import OpenAIBackend

    params = {"model": "gpt-6-astra", "reasoning_effort": "medium", "max_output_tokens": 1200,
              "service_tier": "default", "store": False, "timeout_seconds": 600,
              "timout_seconds": 30}
    with pytest.raises(ValueError, match=r"timout_seconds \(did you mean timeout_seconds\?\)"):
        OpenAIBackend().check_params(params)
