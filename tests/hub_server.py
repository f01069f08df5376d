"""A loopback Hugging Face Hub for the tests: a real HTTP server on 127.0.0.1 that answers the part of the Hub API
that huggingface_hub's clients call to create repos, commit files, list them and download them.

Repos live in memory as git-like histories (commit id -> {path: bytes}, branch -> commit id); a commit with
`create_pr` opens a pull request instead, the ref `refs/pr/N` (N counts from 1) started from the commit's branch, and
leaves that branch as it was. Uploads are
"regular" only: the preupload endpoint marks every file regular, so the client sends contents base64-encoded
in the NDJSON commit and never asks for LFS or Xet storage. Errors carry the `X-Error-Code` header the real
Hub sends, so the clients raise their usual exceptions (`RepositoryNotFoundError`, `EntryNotFoundError`,
`RevisionNotFoundError`).

`loopback_guard()` makes every socket connection to anything other than the loopback interface fail, in this
process; `client_prelude()` is the same guard as source code, for child processes.
"""

import base64
import contextlib
import dataclasses
import datetime
import hashlib
import http.server
import json
import re
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

USER = "loopback-user"
TOKEN = "hf_loopback_token"
MAX_BODY_BYTES = 256 * 2**20
REPO_KINDS = {"models": "model", "datasets": "dataset", "spaces": "space"}
INITIAL_FILES = {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"}


def git_blob_id(content):
    """The git object id of a blob, what the Hub reports as a regular file's oid and ETag."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclasses.dataclass
class Commit:
    id: str
    parent: str | None
    title: str
    message: str
    date: str
    files: dict  # path -> bytes, the whole tree at this commit


@dataclasses.dataclass
class Repo:
    kind: str  # "model", "dataset" or "space"
    repo_id: str
    private: bool
    branches: dict = dataclasses.field(default_factory=dict)  # branch -> commit id
    commits: dict = dataclasses.field(default_factory=dict)  # commit id -> Commit
    pull_requests: list = dataclasses.field(default_factory=list)  # "refs/pr/N" of each, in order; also in branches

    def add_commit(self, branch, files, title, message=""):
        parent = self.branches.get(branch)
        date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        digest = hashlib.sha1(json.dumps([parent, title, date, sorted(files)]).encode())
        for path in sorted(files):
            digest.update(git_blob_id(files[path]).encode())
        commit = Commit(digest.hexdigest(), parent, title, message, date, dict(files))
        self.commits[commit.id] = commit
        self.branches[branch] = commit.id
        return commit

    def resolve(self, revision):
        """The commit a branch name or a full commit id points at, or None."""
        if revision in self.branches:
            return self.commits[self.branches[revision]]
        return self.commits.get(revision)


class HubError(Exception):
    def __init__(self, status, message, error_code=None, headers=None):
        super().__init__(message)
        self.status, self.message, self.error_code, self.headers = status, message, error_code, headers or {}


class LoopbackHub:
    """The in-memory Hub and its HTTP server. `start()` binds a free port on 127.0.0.1; `url` is the endpoint."""

    def __init__(self, max_threads=8):
        self.repos = {}  # (kind, repo_id) -> Repo
        self.requests = []  # (method, path) of every request served, in order
        self.lock = threading.Lock()
        self.max_threads = max_threads
        self._server = None
        self._thread = None

    # ---- lifecycle ----
    def start(self):
        self._server = _BoundedThreadingServer(("127.0.0.1", 0), _make_handler(self), self.max_threads)
        self._thread = threading.Thread(target=self._server.serve_forever, name="loopback-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    @property
    def url(self):
        host, port = self._server.server_address
        return f"http://{host}:{port}"

    def client_env(self, home):
        """Environment variables that point huggingface_hub and transformers at this Hub, with caches in `home`."""
        return {
            "HF_ENDPOINT": self.url,
            "HF_HOME": str(home),
            "HF_HUB_CACHE": str(home / "hub"),
            "HF_MODULES_CACHE": str(home / "modules"),
            "HF_XET_CACHE": str(home / "xet"),
            "HF_TOKEN": TOKEN,
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_UPDATE_CHECK": "1",
            "HF_HUB_OFFLINE": "0",
            "TRANSFORMERS_OFFLINE": "0",
        }

    def repo(self, repo_id, kind="model"):
        return self.repos[(kind, repo_id)]

    # ---- request dispatch ----
    def handle(self, method, raw_path, headers, body):
        """(status, headers dict, body bytes) for one request."""
        split = urlsplit(raw_path)
        segments = [unquote(part) for part in split.path.strip("/").split("/")]
        query = parse_qs(split.query)
        authorized = headers.get("Authorization") == f"Bearer {TOKEN}"
        with self.lock:
            self.requests.append((method, split.path))
            try:
                if segments[0] == "api":
                    return self._api(method, segments[1:], query, body, authorized)
                if "resolve" in segments:
                    return self._resolve(method, segments, authorized)
                raise HubError(404, f"no route for {method} {split.path}")
            except HubError as error:
                extra = dict(error.headers, **{"X-Error-Message": error.message})
                if error.error_code:
                    extra["X-Error-Code"] = error.error_code
                return _json_response(error.status, {"error": error.message}, extra)

    def _api(self, method, segments, query, body, authorized):
        if segments == ["whoami-v2"] and method == "GET":
            self._require_token(authorized)
            return _json_response(200, {"type": "user", "name": USER, "fullname": USER, "orgs": [], "auth": {}})
        if segments == ["repos", "create"] and method == "POST":
            return self._create_repo(json.loads(body), authorized)
        if segments == ["validate-yaml"] and method == "POST":
            return self._validate_yaml(json.loads(body)["content"])
        if len(segments) < 3 or segments[0] not in REPO_KINDS:
            raise HubError(404, f"no API route {'/'.join(segments)}")
        kind, repo_id, rest = REPO_KINDS[segments[0]], f"{segments[1]}/{segments[2]}", segments[3:]
        repo = self._readable_repo(kind, repo_id, authorized)
        if not rest and method == "GET":
            return self._repo_info(repo, repo.resolve("main"))
        action, arguments = rest[0], rest[1:]
        if action == "revision" and method == "GET":
            return self._repo_info(repo, self._commit(repo, arguments[0]))
        if action == "refs" and method == "GET":
            branches = [
                {"name": name, "ref": f"refs/heads/{name}", "targetCommit": commit}
                for name, commit in repo.branches.items()
                if name not in repo.pull_requests
            ]
            pulls = [{"name": ref, "ref": ref, "targetCommit": repo.branches[ref]} for ref in repo.pull_requests]
            return _json_response(200, {"branches": branches, "converts": [], "tags": [], "pullRequests": pulls})
        if action == "tree" and method == "GET":
            return self._tree(repo, self._commit(repo, arguments[0]), "/".join(arguments[1:]), query)
        if action == "commits" and method == "GET":
            return self._history(repo, self._commit(repo, arguments[0]))
        if action == "preupload" and method == "POST":
            self._require_token(authorized)
            return self._preupload(repo, self._commit(repo, arguments[0]), json.loads(body))
        if action == "commit" and method == "POST":
            self._require_token(authorized)
            return self._apply_commit(repo, arguments[0], body, query)
        if action == "branch" and method == "POST":
            self._require_token(authorized)
            return self._create_branch(repo, arguments[0], json.loads(body or b"{}"))
        raise HubError(404, f"no API route {method} {'/'.join(segments)}")

    # ---- API endpoints ----
    def _create_repo(self, payload, authorized):
        self._require_token(authorized)
        kind = payload.get("type") or "model"
        repo_id = f"{payload.get('organization') or USER}/{payload['name']}"
        prefix = "" if kind == "model" else f"{kind}s/"
        url = f"{self.url}/{prefix}{repo_id}"
        if (kind, repo_id) in self.repos:
            return _json_response(409, {"error": "You already created this repo", "url": url})
        repo = Repo(kind, repo_id, private=payload.get("visibility") == "private")
        repo.add_commit("main", INITIAL_FILES, "initial commit")
        self.repos[(kind, repo_id)] = repo
        return _json_response(200, {"url": url, "name": repo_id, "id": repo_id})

    def _validate_yaml(self, content):
        if not content.startswith("---\n"):
            return _json_response(200, {"errors": [], "warnings": [{"message": "empty or missing yaml metadata"}]})
        try:
            metadata = yaml.safe_load(content.split("---\n", 2)[1])
        except (yaml.YAMLError, IndexError) as error:
            return _json_response(400, {"errors": [{"message": f"invalid YAML: {error}"}], "warnings": []})
        if not isinstance(metadata, dict):
            return _json_response(400, {"errors": [{"message": "metadata must be a mapping"}], "warnings": []})
        return _json_response(200, {"errors": [], "warnings": []})

    def _repo_info(self, repo, commit):
        info = {
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": commit.id,
            "lastModified": commit.date,
            "private": repo.private,
            "disabled": False,
            "gated": False,
            "tags": [],
            "siblings": [{"rfilename": path} for path in sorted(commit.files)],
        }
        return _json_response(200, info)

    def _tree(self, repo, commit, directory, query):
        prefix = f"{directory}/" if directory else ""
        recursive = query.get("recursive", ["False"])[0].lower() == "true"
        entries, folders = [], set()
        for path in sorted(commit.files):
            if not path.startswith(prefix):
                continue
            relative = path[len(prefix) :]
            if "/" in relative and not recursive:
                folders.add(prefix + relative.split("/")[0])
                continue
            content = commit.files[path]
            entries.append({"type": "file", "path": path, "size": len(content), "oid": git_blob_id(content)})
        if directory and not entries and not folders:
            raise HubError(404, f"{directory} not found at {commit.id}", "EntryNotFound")
        entries += [{"type": "directory", "path": folder, "oid": "0" * 40, "size": 0} for folder in sorted(folders)]
        return _json_response(200, entries)

    def _history(self, repo, commit):
        history = []
        while commit is not None:
            history.append(
                {
                    "id": commit.id,
                    "title": commit.title,
                    "message": commit.message,
                    "date": commit.date,
                    "authors": [{"user": USER}],
                }
            )
            commit = repo.commits.get(commit.parent)
        return _json_response(200, history)

    def _preupload(self, repo, commit, payload):
        files = []
        for entry in payload["files"]:
            existing = commit.files.get(entry["path"])
            files.append(
                {
                    "path": entry["path"],
                    "uploadMode": "regular",  # never "lfs": contents travel inline in the commit
                    "shouldIgnore": False,
                    "oid": None if existing is None else git_blob_id(existing),
                }
            )
        return _json_response(200, {"files": files, "commitOid": commit.id})

    def _apply_commit(self, repo, branch, body, query):
        if branch not in repo.branches:
            raise HubError(404, f"branch {branch} not found", "RevisionNotFound")
        pull_request = query.get("create_pr", ["0"])[0] not in ("0", "false", "False")
        if pull_request:  # the PR's ref starts at the branch's head and takes the commit; the branch stays
            number = len(repo.pull_requests) + 1
            repo.pull_requests.append(f"refs/pr/{number}")
            repo.branches[f"refs/pr/{number}"] = repo.branches[branch]
            branch = f"refs/pr/{number}"
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        if not lines or lines[0]["key"] != "header":
            raise HubError(400, "the commit payload must start with a header line")
        header = lines[0]["value"]
        head = repo.resolve(branch)
        if header.get("parentCommit") not in (None, head.id):
            raise HubError(412, f"parent commit {header['parentCommit']} is not the head of {branch}")
        files = dict(head.files)
        for line in lines[1:]:
            key, value = line["key"], line["value"]
            if key == "file":
                if value.get("encoding") != "base64":
                    raise HubError(400, f"unsupported encoding {value.get('encoding')!r}")
                files[value["path"]] = base64.b64decode(value["content"])
            elif key == "deletedFile":
                if value["path"] not in files:
                    raise HubError(404, f"{value['path']} not found", "EntryNotFound")
                del files[value["path"]]
            elif key == "deletedFolder":
                folder = value["path"].rstrip("/") + "/"
                files = {path: content for path, content in files.items() if not path.startswith(folder)}
            else:
                raise HubError(400, f"the loopback Hub accepts regular files only, got a {key!r} operation")
        commit = repo.add_commit(branch, files, header["summary"], header.get("description", ""))
        prefix = "" if repo.kind == "model" else f"{repo.kind}s/"
        pull_request_url = f"{self.url}/{prefix}{repo.repo_id}/discussions/{number}" if pull_request else None
        return _json_response(
            200,
            {
                "success": True,
                "commitOid": commit.id,
                "pullRequestUrl": pull_request_url,
                "commitUrl": f"{self.url}/{prefix}{repo.repo_id}/commit/{commit.id}",
            },
        )

    def _create_branch(self, repo, branch, payload):
        if branch in repo.branches:
            raise HubError(409, f"branch {branch} already exists")
        start = self._commit(repo, payload.get("startingPoint") or "main")
        repo.branches[branch] = start.id
        return _json_response(200, {})

    # ---- downloads ----
    def _resolve(self, method, segments, authorized):
        kind = "model"
        if segments[0] in ("datasets", "spaces"):
            kind, segments = REPO_KINDS[segments[0]], segments[1:]
        if len(segments) < 5 or segments[2] != "resolve":
            raise HubError(404, f"no route for {'/'.join(segments)}")
        repo = self._readable_repo(kind, f"{segments[0]}/{segments[1]}", authorized)
        commit = self._commit(repo, segments[3])
        path = "/".join(segments[4:])
        headers = {"X-Repo-Commit": commit.id}
        if path not in commit.files:
            raise HubError(404, f"{path} not found at {commit.id}", "EntryNotFound", headers)
        content = commit.files[path]
        headers.update({"ETag": f'"{git_blob_id(content)}"', "Content-Type": "application/octet-stream"})
        return 200, headers, content if method == "GET" else b"", len(content)

    # ---- helpers ----
    def _readable_repo(self, kind, repo_id, authorized):
        repo = self.repos.get((kind, repo_id))
        if repo is None or (repo.private and not authorized):
            # The Hub answers a private repo without credentials exactly like a missing one.
            raise HubError(401 if repo is not None else 404, f"repository {repo_id} not found", "RepoNotFound")
        return repo

    @staticmethod
    def _commit(repo, revision):
        commit = repo.resolve(revision)
        if commit is None:
            raise HubError(404, f"revision {revision} not found in {repo.repo_id}", "RevisionNotFound")
        return commit

    @staticmethod
    def _require_token(authorized):
        if not authorized:
            raise HubError(401, "Invalid credentials in Authorization header")


def _json_response(status, payload, headers=None):
    body = json.dumps(payload).encode()
    return status, {"Content-Type": "application/json", **(headers or {})}, body


class _BoundedThreadingServer(http.server.HTTPServer):
    """An HTTP server whose requests run on a fixed pool of `max_threads` threads."""

    def __init__(self, address, handler, max_threads):
        super().__init__(address, handler)
        self._pool = ThreadPoolExecutor(max_threads, thread_name_prefix="loopback-hub-request")

    def process_request(self, request, client_address):
        self._pool.submit(self._process, request, client_address)

    def _process(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - reported like socketserver does, the server keeps serving
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def server_close(self):
        super().server_close()
        self._pool.shutdown(wait=True)


def _make_handler(hub):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection: no idle keep-alive holds a pool thread
        timeout = 30

        def _serve(self, method):
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                status, headers, body = _json_response(413, {"error": f"body of {length} bytes is too large"})
                content_length = len(body)
            else:
                request_body = self.rfile.read(length) if length else b""
                result = hub.handle(method, self.path, self.headers, request_body)
                status, headers, body = result[:3]
                content_length = result[3] if len(result) == 4 else len(body)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(content_length))
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(body)

        def do_GET(self):
            self._serve("GET")

        def do_HEAD(self):
            self._serve("HEAD")

        def do_POST(self):
            self._serve("POST")

        def do_PUT(self):
            self._serve("PUT")

        def log_message(self, format, *args):  # noqa: A002 - the base class's signature
            pass  # requests are recorded in `hub.requests`

    return Handler


# ---- network guard ----

LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


class NonLoopbackConnection(ConnectionError):
    """Raised when a test tries to reach anything other than 127.0.0.1."""


@contextlib.contextmanager
def loopback_guard():
    """Within the block, resolving a host name other than localhost or connecting any IP socket to a non-loopback
    address raises `NonLoopbackConnection`.
    Yields the list of blocked addresses, so that a caller can also fail on attempts a library swallowed."""
    blocked = []
    original_connect, original_connect_ex = socket.socket.connect, socket.socket.connect_ex
    original_getaddrinfo = socket.getaddrinfo

    def check(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOOPBACK_HOSTS:
            blocked.append(address)
            raise NonLoopbackConnection(f"test tried to connect to {address}")

    def connect(sock, address):
        check(sock, address)
        return original_connect(sock, address)

    def connect_ex(sock, address):
        check(sock, address)
        return original_connect_ex(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        if host is not None and host not in LOOPBACK_HOSTS:  # not even a DNS query leaves the machine
            blocked.append((host, args[0] if args else kwargs.get("port")))
            raise NonLoopbackConnection(f"test tried to resolve {host!r}")
        return original_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
    try:
        yield blocked
    finally:
        socket.socket.connect, socket.socket.connect_ex = original_connect, original_connect_ex
        socket.getaddrinfo = original_getaddrinfo


def client_prelude(tests_dir):
    """Python source that a child process runs first: the loopback guard, for the whole process, reporting
    swallowed attempts at exit with status 97."""
    return (
        "import atexit, os, sys\n"
        f"sys.path.insert(0, {str(tests_dir)!r})\n"
        "import hub_server\n"
        "_guard = hub_server.loopback_guard()\n"
        "_blocked = _guard.__enter__()\n"
        "atexit.register(lambda: _blocked and (print('non-loopback connections:', _blocked, file=sys.stderr),"
        " os._exit(97)))\n"
    )


# A plain file server, for downloads that are not from a Hub (the published bilm-tf files).


class FileServer:
    """Serves `files` ({path: bytes}) on 127.0.0.1 with HTTP Range support, recording each GET as (path, Range
    header, bytes sent). `cut_after[path] = n` makes the next answer for `path` stop after n bytes of its body while
    its Content-Length announces all of them (a connection that breaks)."""

    def __init__(self, files):
        self.files, self.requests, self.cut_after = files, [], {}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                content = server.files.get(self.path)
                if content is None:
                    self.send_error(404)
                    return
                start, status, headers = 0, 200, {}
                range_header = self.headers.get("Range")
                if range_header:
                    start = int(re.fullmatch(r"bytes=(\d+)-", range_header).group(1))
                    status = 206
                    headers["Content-Range"] = f"bytes {start}-{len(content) - 1}/{len(content)}"
                body = content[start:]
                sent = body[: server.cut_after.pop(self.path, len(body))]
                server.requests.append((self.path, range_header, len(sent)))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(sent)

            def log_message(self, format, *args):  # noqa: A002 - the base class's signature
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/elmo"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
