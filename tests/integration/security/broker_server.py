"""The servers of the brokered-secrets tests, run in a container of the test's own (its own
network namespace): HTTPS on 8443 (api.svc.test: the host the secret is for; git smart HTTP under
/repo.git, which wants Basic x-access-token:<the real value>; anything else answers what it got)
and plain HTTP on 8000 (other.svc.test: where an agent would send a stolen value). Every request
is printed as one JSON line on stdout, which the test reads with the container's logs."""
import http.server
import json
import os
import ssl
import subprocess
import sys
import threading

EXPECT = os.environ["EXPECT_AUTH"]  # base64 of x-access-token:<real value>
ROOT = "/tmp/git"


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _any(self):
        body = self._body()
        print(json.dumps({"port": self.server.server_address[1], "method": self.command, "path": self.path,
                          "headers": dict(self.headers.items()), "body": body.decode("latin-1")}), flush=True)
        if self.path.startswith("/repo.git/"):
            return self._git(body)
        out = json.dumps({"authorization": self.headers.get("Authorization"), "host": self.headers.get("Host")}).encode()
        self._send(200, out, "application/json")

    def _git(self, body):
        if self.headers.get("Authorization") != "Basic " + EXPECT:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        env = {"GIT_PROJECT_ROOT": ROOT, "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path, "QUERY_STRING": query,
               "REQUEST_METHOD": self.command, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_USER": "x-access-token", "REMOTE_ADDR": "127.0.0.1",
               "PATH": "/usr/bin:/bin", "HOME": "/tmp"}
        res = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
        head, _, payload = res.stdout.partition(b"\r\n\r\n")
        status, ctype = 200, "text/plain"
        for line in head.decode("latin-1").split("\r\n"):
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.split()[0])
            elif k.lower() == "content-type":
                ctype = v.strip()
        self._send(status, payload, ctype)

    def _send(self, status, data, ctype):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = _any

    def log_message(self, *a):
        pass


def main():
    os.makedirs(ROOT, exist_ok=True)
    subprocess.run(["git", "init", "-q", "--bare", f"{ROOT}/repo.git"], check=True)
    subprocess.run(["git", "--git-dir", f"{ROOT}/repo.git", "config", "http.receivepack", "true"], check=True)
    tls = http.server.ThreadingHTTPServer(("0.0.0.0", 8443), H)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[1])
    tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
    plain = http.server.ThreadingHTTPServer(("0.0.0.0", 8000), H)
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    print("ready", flush=True)
    tls.serve_forever()


main()
