"""ctest status_page_test: the status page (GET /, docs/http-api.md "Status
page") rendered by headless Chromium while clusterkv_soak puts load on the
server.

Starts clusterkv-server (tests/deploy/deploy_util.py's Server: a tiny random
model, --http-listen on an ephemeral port, recall sampling on), keeps three
sessions of its own open over HTTP, runs clusterkv_soak --server against it
and, during the load, takes a screenshot (WORK_DIR/statuspage.png) and dumps
the DOM: the tokens/s chart must hold drawn points. After the soak (its
clients close their sessions) it dumps the DOM again: the session count the
page shows must equal the server's own (gRPC ListSessions), the page must
have updated more than once, and the queue chart must be drawn. A missing
chromium fails the test.

Usage: status_page_test.py SERVER_BIN MODEL_TOOL SOAK_BIN WORK_DIR
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "deploy"))
import deploy_util  # noqa: E402

OWN_SESSIONS = 3
SOAK_SECONDS = 7


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    fail("chromium is not installed (scripts/setup.sh installs Debian's "
         "chromium)")


def browse(browser, work, url, *args):
    """Runs headless Chromium on url for 3 s of page time; its stdout."""
    cmd = [browser, "--headless=new", "--disable-gpu", "--no-first-run",
           "--user-data-dir=" + os.path.join(work, "chromium-profile"),
           "--window-size=1280,960", "--virtual-time-budget=3000", *args, url]
    if os.geteuid() == 0:
        cmd.insert(1, "--no-sandbox")  # Chromium refuses root without it
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail("chromium exit code %d:\n%s" % (r.returncode, r.stderr[-3000:]))
    return r.stdout


def attr(dom, element_id, name):
    """The value of attribute `name` of the element with id `element_id`."""
    m = re.search(r'<[^>]*\bid="%s"[^>]*>' % re.escape(element_id), dom)
    if not m:
        fail("no element #%s in the page:\n%s" % (element_id, dom[:2000]))
    v = re.search(r'\b%s="([^"]*)"' % re.escape(name), m.group(0))
    if not v:
        fail("#%s has no %s: %s" % (element_id, name, m.group(0)))
    return v.group(1)


def chart_points(dom, chart_id):
    """Points the page says it drew, checked against the polylines' points."""
    drawn = int(attr(dom, chart_id, "data-points"))
    svg = re.search(r'<svg[^>]*\bid="%s".*?</svg>' % chart_id, dom, re.S)
    polylines = re.findall(r'<polyline[^>]*\bpoints="([^"]*)"', svg.group(0))
    circles = len(re.findall(r"<circle\b", svg.group(0)))
    counted = sum(len(p.split()) for p in polylines) + circles
    if counted != drawn:
        fail("%s: data-points=%d but %d points in the SVG"
             % (chart_id, drawn, counted))
    return drawn, max([len(p.split()) for p in polylines] or [0])


def main():
    server_bin, model_tool, soak_bin, work = sys.argv[1:5]
    browser = chromium()
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "tiny.gguf")
    deploy_util.make_tiny_model(model_tool, model)
    server = deploy_util.Server(
        server_bin, model, work, "server", http=True,
        extra=["--prefill-chunk", "64", "--policy", "clusterkv",
               "--dense-layers", "1", "--tokens-per-cluster", "16",
               "--window", "32", "--budget", "32", "--recall-sample-every",
               "4", "--max-prompt-tokens", "512", "--max-session-tokens",
               "1024", "--max-sessions", "20"])
    soak = None
    try:
        base = "http://" + server.http_address
        for _ in range(OWN_SESSIONS):
            req = urllib.request.Request(
                base + "/v1/completions", method="POST",
                data=json.dumps({"prompt": "status page " * 20,
                                 "max_tokens": 8}).encode(),
                headers={"Content-Type": "application/json",
                         "x-session-id": "page.new"})
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
        # The screenshot and the DOM of one load, while the soak runs. A
        # machine under load can take chromium longer than the soak: then
        # the soak runs again, long enough for the load time just measured.
        shot = os.path.join(work, "statuspage.png")
        seconds = SOAK_SECONDS
        for attempt in range(2):
            soak_log = open(os.path.join(work, "soak.log"), "w")
            soak = subprocess.Popen(
                [soak_bin, "--server", server.address, "--clients", "4",
                 "--seconds", str(seconds), "--seed", "3"],
                stdout=soak_log, stderr=subprocess.STDOUT)
            time.sleep(2)  # the history gets samples under load
            if os.path.exists(shot):
                os.remove(shot)
            started = time.monotonic()
            dom = browse(browser, work, base + "/", "--screenshot=" + shot,
                         "--dump-dom")
            load_seconds = time.monotonic() - started
            if soak.poll() is None:
                break
            if soak.returncode != 0 or attempt == 1:
                fail("clusterkv_soak ended (exit %s) before the page was "
                     "loaded (chromium took %.1f s)"
                     % (soak.returncode, load_seconds))
            print("chromium took %.1f s, longer than the %d s soak: again"
                  % (load_seconds, seconds))
            seconds = int(2 * load_seconds) + SOAK_SECONDS
        if not os.path.getsize(shot) > 10000:
            fail("no screenshot written at " + shot)
        drawn, longest = chart_points(dom, "chart-tps")
        if longest < 2:
            fail("tokens/s chart: no polyline of 2+ points under load "
                 "(%d points drawn)" % drawn)
        if not float(attr(dom, "chart-tps", "data-max")) > 0:
            fail("tokens/s chart: no token counted under load")
        print("ok under load: screenshot %s, tokens/s chart %d points"
              % (shot, drawn))
        if soak.wait(timeout=seconds + 60) != 0:
            with open(os.path.join(work, "soak.log")) as f:
                fail("clusterkv_soak failed:\n" + f.read())
        soak = None
        # The soak's clients closed their sessions: the count is stable.
        dom = browse(browser, work, base + "/", "--dump-dom")
        grpc = __import__("grpc")
        pb = deploy_util.load_proto(work)
        client = deploy_util.Client(grpc, pb, server.address)
        listed = client.unary("ListSessions", pb.ListSessionsRequest(),
                              pb.ListSessionsResponse)
        client.close()
        actual = len(listed.sessions)
        shown = attr(dom, "sessions-count", "data-count")
        text = re.search(r'id="sessions-count"[^>]*>([^<]*)<', dom).group(1)
        if actual != OWN_SESSIONS or shown != str(actual) or text != shown:
            fail("sessions: page shows %r (data-count %r), server has %d, "
                 "expected %d" % (text, shown, actual, OWN_SESSIONS))
        if attr(dom, "status-body", "data-state") != "ok":
            fail("page state is not ok:\n" + dom[:3000])
        if int(attr(dom, "status-body", "data-updates")) < 2:
            fail("the page did not refresh itself")
        if chart_points(dom, "chart-queue")[1] < 2:
            fail("queue chart: no polyline of 2+ points")
        print("ok after load: page shows %s sessions = ListSessions" % shown)
    finally:
        if soak is not None:
            soak.kill()
            soak.wait()
        server.stop()
    print("PASS")


if __name__ == "__main__":
    main()
