"""The notebook, seen in a real browser on the real node.

A user's path (values-examples/notebook-coordinator.yaml, docs/user-guide/notebook.md): the
release runs JupyterLab whose kernel is the ParameterServer chief, one ps and two worker servers,
and TensorBoard. Headless Chromium (Debian's chromium + chromium-driver, driven by Selenium) logs
into JupyterLab with the token the notebook pod stored in its Secret (read the way NOTES say),
opens the example notebook, runs every cell against the release's servers, follows the notebook's
TensorBoard link and sees the run's scalars. JupyterLab and TensorBoard are reached through
`kubectl port-forward`, as NOTES tell users. Screenshots go to build/artifacts/notebook/.

Then the lifecycle: `session.done()` stops the servers (their Jobs complete); a kernel killed
mid-session stops them within `notebook.heartbeatTimeoutSeconds` (+ the launcher's poll); removing
the release removes everything, the token's Secret too.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from test_cluster import EX, KUBECONFIG, install, say

from tf_cluster import kube

ROOT = Path(__file__).resolve().parents[3]
KUBECTL = ROOT / ".tools" / "bin" / "kubectl"
ARTIFACTS = Path(os.environ.get("TF_CLUSTER_ARTIFACTS", ROOT / "build" / "artifacts")) / "notebook"
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
EXAMPLE = "parameter-server-coordinator.ipynb"
HEARTBEAT_TIMEOUT = 30  # the schema's least; the chart's default is 300
POLL = 5  # launcher.pollSeconds
# SIGKILL every Jupyter kernel in the notebook pod (not this script, whose own command line names them)
KILL_KERNEL = """
import os, signal
for p in filter(str.isdigit, os.listdir("/proc")):
    if int(p) != os.getpid() and b"ipykernel_launcher" in open(f"/proc/{p}/cmdline", "rb").read():
        os.kill(int(p), signal.SIGKILL)
        print("killed kernel", p)
"""

pytestmark = pytest.mark.needs(
    "Debian's chromium and chromium-driver",
    bool(CHROMIUM and CHROMEDRIVER),
    "`hack/node/build.sh browser` installs them; `make e2e` does",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def port_forward(ns: str, target: str, remote: int, local: int = 0):
    """`kubectl port-forward` as NOTES print it (on `local`, else a free port); yields the local URL
    once it answers."""
    local = local or free_port()
    argv = [KUBECTL, "--kubeconfig", KUBECONFIG, "-n", ns, "port-forward", target, f"{local}:{remote}"]
    proc = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", local), timeout=1):
                break
            assert proc.poll() is None, f"port-forward {target} ended: {proc.stdout.read() if proc.stdout else ''}"
            time.sleep(0.3)
        yield f"http://localhost:{local}"
    finally:
        proc.terminate()
        proc.wait(10)


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def shot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    say(f"screenshot {path}")
    return path


def not_yet_errors() -> tuple[type[Exception], ...]:
    """What a page that is still rendering raises: an element not there yet, replaced under us
    (JupyterLab re-renders cells), or covered/not yet interactable. A wait treats these as "not yet"."""
    from selenium.common.exceptions import (
        ElementClickInterceptedException,
        ElementNotInteractableException,
        NoSuchElementException,
        StaleElementReferenceException,
    )

    return (
        NoSuchElementException,
        StaleElementReferenceException,
        ElementNotInteractableException,
        ElementClickInterceptedException,
    )


def poll(check, timeout: float, every: float) -> tuple[object, str]:
    """Call check() until it is truthy or `timeout` passes: (its value or None, the last "not yet"
    error). A check that raises one of not_yet_errors() has not seen it yet; any other exception
    is a failure and propagates."""
    deadline = time.monotonic() + timeout
    transient = not_yet_errors()
    last_error = ""
    while True:
        try:
            value = check()
        except transient as e:
            value, last_error = None, f"; last: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if value:
            return value, last_error
        if time.monotonic() > deadline:
            return None, last_error
        time.sleep(every)


def wait_for(what: str, check, timeout: float, every: float = 1.0, on_timeout=None):
    """check() once it is truthy (see poll); an AssertionError naming `what` when it is not in time."""
    value, last_error = poll(check, timeout, every)
    if value:
        return value
    detail = on_timeout() if on_timeout else ""
    raise AssertionError(f"{what}: not within {timeout:.0f}s{last_error}{detail}")


def wait_for_or_none(check, timeout: float, every: float = 0.5):
    """check() once it is truthy within timeout, else None (for a step the caller retries)."""
    return poll(check, timeout, every)[0]


def nth_cell(driver, n: int):
    """The notebook's n-th cell (0-based), or None while JupyterLab has rendered fewer."""
    from selenium.webdriver.common.by import By

    cells = driver.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel .jp-Cell")
    return cells[n] if len(cells) > n else None


def kubectl(*args: str) -> str:
    r = subprocess.run([str(KUBECTL), "--kubeconfig", KUBECONFIG, *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def tensorboard_scalars(url: str) -> list:
    """TensorBoard's own data API: [wall time, step, value] of the notebook run's epoch_loss."""
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/data/plugin/scalars/scalars?tag=epoch_loss&run=notebook", timeout=10) as r:
            return json.load(r)
    except OSError:
        return []


def in_notebook(ns: str, release: str, *argv: str) -> str:
    """A command in the release's notebook container (kubectl exec), its output."""
    return kubectl("-n", ns, "exec", f"deploy/{release}-tf-cluster-notebook", "-c", "notebook", "--", *argv)


def heartbeat_of(ns: str) -> dict:
    """The coordinator's heartbeat: the data of the ConfigMap named like the chief Job."""
    maps = yaml.safe_load(kubectl("-n", ns, "get", "configmaps", "-o", "yaml"))["items"]
    (beat,) = [m for m in maps if "-tf-cluster-chief-" in m["metadata"]["name"]]
    return beat.get("data") or {}


def token_from_secret(ns: str, secret: str) -> str:
    """What NOTES tell the user: kubectl get secret ... -o jsonpath='{.data.token}' | base64 -d."""
    data = kubectl("-n", ns, "get", "secret", secret, "-o", "jsonpath={.data.token}")
    return base64.b64decode(data).decode()


def ready(api, ns: str, deployment: str) -> bool:
    from kubernetes import client

    d = client.AppsV1Api(api).read_namespaced_deployment(deployment, ns)
    return (d.status.ready_replicas or 0) >= 1


def jobs_state(api, ns: str) -> dict[str, str]:
    from kubernetes import client

    out = {}
    for j in client.BatchV1Api(api).list_namespaced_job(ns).items:
        types = {c.type for c in j.status.conditions or [] if c.status == "True"}
        out[j.metadata.name] = "Complete" if "Complete" in types else "Failed" if "Failed" in types else "running"
    return out


def start_release(api, ns: str, release: str, tmp_path: Path, tensorboard_port: int):
    values = tmp_path / "notebook.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "notebook": {
                    "heartbeatTimeoutSeconds": HEARTBEAT_TIMEOUT,
                    # where this test's port-forward of TensorBoard listens: the notebook links there
                    "tensorboardUrl": f"http://localhost:{tensorboard_port}/",
                    "resources": {"requests": {"cpu": "200m", "memory": "512Mi"}},
                },
                "tensorboard": {"resources": {"requests": {"cpu": "10m", "memory": "128Mi"}}},
            }
        )
    )
    t0 = time.monotonic()
    install(ns, release, EX / "notebook-coordinator.yaml", values)
    for d in (f"{release}-tf-cluster-notebook", f"{release}-tf-cluster-tensorboard"):
        wait_for(f"{d} ready", lambda d=d: ready(api, ns, d), 300, every=2)
    say(f"release {release}: JupyterLab and TensorBoard ready {time.monotonic() - t0:.0f}s after install")


def log_in(driver, url: str, token: str):
    """JupyterLab's login page, as a user meets it: paste the token, submit."""
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/login?next=%2Flab")
    field = wait_for(
        "the login page's token field", lambda: driver.find_elements(By.CSS_SELECTOR, "input[type=password]"), 60
    )
    field[0].send_keys(token)
    wait_for(
        "the login page's submit button",
        lambda: driver.find_elements(By.CSS_SELECTOR, "#login_submit, button[type=submit], input[type=submit]"),
        30,
    )[0].click()
    wait_for("JupyterLab after login", lambda: driver.find_elements(By.CSS_SELECTOR, "#jp-main-dock-panel"), 120)


def open_notebook(driver, url: str):
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/lab/tree/{EXAMPLE}")
    wait_for(
        "the example notebook open", lambda: driver.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel .jp-Cell"), 120
    )
    wait_for("its kernel idle", lambda: kernel_idle(driver), 120)


def kernel_idle(driver) -> bool:
    """The status bar names a kernel that is idle ("Python 3 (ipykernel) | Idle"). Not the execution
    indicator alone: it says idle before any kernel is connected ("No Kernel | Initializing" in the
    status bar), and a Run All clicked then ran nothing (a cold CI run waited 600 s on no output)."""
    from selenium.webdriver.common.by import By

    text = driver.find_element(By.TAG_NAME, "body").text
    return "No Kernel" not in text and bool(re.search(r"\S \| Idle\b", text))


def cells_started(driver) -> bool:
    """A cell is queued or running ("[*]"), or one has run (a number or an output)."""
    from selenium.webdriver.common.by import By

    prompts = [p.text for p in driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-InputPrompt")]
    return any("*" in p or re.search(r"\[\d+\]", p) for p in prompts) or bool(outputs(driver).strip())


def menu(driver, top: str, label: str):
    """Click a JupyterLab menu item, as a user does: the top-level menu, then the item by its label."""
    from selenium.webdriver.common.by import By

    def top_item():
        found = [m for m in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-item") if m.text.strip() == top]
        return found[0] if len(found) == 1 else None

    def entry():
        found = driver.find_elements(By.CSS_SELECTOR, ".lm-Menu-item .lm-Menu-itemLabel")
        return [e for e in found if e.text.strip() == label]

    def open_and_click():  # the menu opens on a click; a click on a re-rendered bar is tried again
        top_item_now = top_item()
        if top_item_now is None:
            return False
        if not entry():
            top_item_now.click()
        item = wait_for_or_none(entry, 5)
        if not item:
            return False
        item[0].click()
        return True

    wait_for(f"menu {top} > {label}", open_and_click, 30)


def outputs(driver) -> str:
    from selenium.webdriver.common.by import By

    return "\n".join(o.text for o in driver.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output"))


def errors(driver) -> str:
    text = outputs(driver)
    return (
        text if re.search(r"Traceback \(most recent call last\)|Error:", text) and "Logging error" not in text else ""
    )


def test_notebook_trains_on_the_release_in_a_browser_and_tensorboard_shows_it(api_ns_release, tmp_path):
    api, ns, release = api_ns_release
    tb_local = free_port()
    start_release(api, ns, release, tmp_path, tb_local)
    token = token_from_secret(ns, f"{release}-tf-cluster-notebook")
    assert re.fullmatch(r"[0-9a-f]{48}", token), "the notebook pod stored a random token"
    driver = browser()
    try:
        with (
            port_forward(ns, f"svc/{release}-tf-cluster-notebook", 8888) as lab,
            port_forward(ns, f"svc/{release}-tf-cluster-tensorboard", 6006, tb_local) as tb,
        ):
            driver.get(f"{lab}/lab")
            assert "login" in driver.current_url, "JupyterLab let a browser in without the token"
            log_in(driver, lab, token)
            open_notebook(driver, lab)
            shot(driver, "1-opened")
            t0 = time.monotonic()
            menu(driver, "Run", "Run All Cells")
            if not wait_for_or_none(lambda: cells_started(driver), 60):
                say("Run All Cells started no cell within 60 s; clicking it again")
                menu(driver, "Run", "Run All Cells")
                wait_for("a cell started after Run All Cells", lambda: cells_started(driver), 60)
            say("Run > Run All Cells clicked; waiting for the last cell (TF-CLUSTER NOTEBOOK DONE)")
            last = [""]

            def finished():
                text = outputs(driver)
                epochs = re.findall(r"epoch (\d+)/(\d+): loss ([\d.]+)", text)
                if epochs and epochs[-1] != last[0]:
                    last[0] = epochs[-1]
                    say(
                        f"  notebook: epoch {epochs[-1][0]}/{epochs[-1][1]} loss {epochs[-1][2]} "
                        f"({time.monotonic() - t0:.0f}s)"
                    )
                assert not errors(driver), f"a cell failed:\n{errors(driver)[-3000:]}"
                return "TF-CLUSTER NOTEBOOK DONE" in text

            wait_for(
                "every cell run", finished, 600, every=2, on_timeout=lambda: f"; outputs:\n{outputs(driver)[-3000:]}"
            )
            took = time.monotonic() - t0
            say(f"notebook ran to completion in {took:.0f}s against the release's ps and 2 workers")
            text = outputs(driver)
            assert "'chief': 1, 'ps': 1, 'worker': 2" in text
            losses = [float(x) for x in re.findall(r"epoch \d+/\d+: loss ([\d.]+)", text)]
            assert len(losses) == 5 and losses[-1] < losses[0], losses
            assert "saved_model.pb" in text
            shot(driver, "2-notebook-done")

            # the notebook's own link to TensorBoard, followed as a user would
            from selenium.webdriver.common.by import By

            link = wait_for(
                "the notebook's TensorBoard link", lambda: driver.find_elements(By.ID, "tensorboard-link"), 30
            )[0]
            assert link.get_attribute("href") == f"http://localhost:{tb_local}/"
            link.click()
            wait_for("TensorBoard's tab", lambda: len(driver.window_handles) > 1, 20)
            driver.switch_to.window(driver.window_handles[-1])

            def scalars_shown():
                body = driver.find_element(By.TAG_NAME, "body").text
                if "epoch_loss" in body and "notebook" in body:
                    return True
                driver.refresh()
                return False

            wait_for(
                "TensorBoard showing the run's epoch_loss",
                scalars_shown,
                180,
                every=10,
                on_timeout=lambda: f"; page: {driver.find_element(By.TAG_NAME, 'body').text[:800]}",
            )
            # every epoch the notebook printed, with its loss, is what TensorBoard serves for the run
            # (it re-reads the logs every few seconds: wait for the last epoch, then redraw)
            points = wait_for(
                "TensorBoard holding all 5 epochs", lambda: len(s := tensorboard_scalars(tb)) == 5 and s, 120, every=5
            )
            assert [step for _, step, _ in points] == [1, 2, 3, 4, 5]
            assert [round(v, 4) for _, _, v in points] == losses
            driver.refresh()
            time.sleep(5)  # let the chart draw
            shot(driver, "3-tensorboard")
            say(f"TensorBoard shows the notebook's run: epoch_loss at steps 1-5 = {losses}")
    finally:
        driver.quit()

    # session.done() in the last cell: the servers stop, their Jobs complete (no chief Job exists)
    states = wait_for(
        "ps and worker Jobs Complete after session.done()",
        lambda: (s := jobs_state(api, ns)) and all(v == "Complete" for v in s.values()) and s,
        60,
    )
    assert sorted(re.sub(r"-[0-9a-f]{6}$", "", j) for j in states) == [
        f"{release}-tf-cluster-ps",
        f"{release}-tf-cluster-worker",
    ]
    say(f"servers stopped after session.done(): {states}")
    model = in_notebook(ns, release, "ls", "/mnt/checkpoints/model/notebook")
    assert "saved_model.pb" in model


def test_a_killed_kernel_stops_the_servers_within_the_bound_and_uninstall_removes_all(api_ns_release, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    api, ns, release = api_ns_release
    start_release(api, ns, release, tmp_path, free_port())
    token = token_from_secret(ns, f"{release}-tf-cluster-notebook")
    driver = browser()
    try:
        with port_forward(ns, f"svc/{release}-tf-cluster-notebook", 8888) as lab:
            log_in(driver, lab, token)
            open_notebook(driver, lab)

            # run the first code cell only: the kernel connects (its heartbeat starts), nothing else
            def run_first_code_cell():
                """Select the cell by its prompt (command mode), Shift+Enter; True once its output is there.
                A key press that lands before JupyterLab has focused the cell is lost: then again."""
                if "tf-cluster session" in outputs(driver):
                    return True
                cell = nth_cell(driver, 1)
                if cell is None:  # JupyterLab has not rendered the cells (yet, or again): not yet
                    return None
                if "[*]" not in cell.find_element(By.CSS_SELECTOR, ".jp-InputPrompt").text:
                    cell.find_element(By.CSS_SELECTOR, ".jp-InputPrompt").click()
                    ActionChains(driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
                return wait_for_or_none(lambda: "tf-cluster session" in outputs(driver), 20)

            wait_for(
                "the session cell run (its output)",
                run_first_code_cell,
                120,
                every=0.5,
                on_timeout=lambda: f"; outputs: {outputs(driver)[-2000:]}",
            )
            shot(driver, "4-connected")
    finally:
        driver.quit()
    beat = heartbeat_of(ns)
    assert "/kernel-" in beat.get("holderIdentity", ""), beat
    # `helm test` from inside the cluster: the coordinator's heartbeat is live and every task resolves,
    # the chief's address (the notebook pod's) included
    from test_cluster import helm_in

    t = helm_in(ns).test(release, timeout="3m")
    assert t.returncode == 0, t.stdout + t.stderr
    say("helm test passed while the kernel coordinates (its heartbeat live, every task address resolves)")
    time.sleep(2 * POLL)
    assert all(v == "running" for v in jobs_state(api, ns).values()), "servers stopped while the kernel lived"
    # the kernel dies (SIGKILL: no done(), no goodbye)
    in_notebook(ns, release, "python3", "-c", KILL_KERNEL)
    killed = time.monotonic()
    say(f"kernel killed; servers should stop within {HEARTBEAT_TIMEOUT}s + the {POLL}s poll")
    wait_for(
        "ps and worker Jobs Complete after the kernel died",
        lambda: all(v == "Complete" for v in jobs_state(api, ns).values()),
        HEARTBEAT_TIMEOUT + 4 * POLL + 30,
    )
    took = time.monotonic() - killed
    say(f"servers stopped {took:.0f}s after the kernel was killed (bound {HEARTBEAT_TIMEOUT}s + poll {POLL}s)")
    assert took <= HEARTBEAT_TIMEOUT + 3 * POLL + 15
    # removing the release: nothing of it remains, the token's Secret included
    assert helm_in(ns).uninstall(release).returncode == 0
    wait_for(
        "nothing of the release left",
        lambda: not kube.release_objects(api, ns, release, count_terminating=False),
        120,
        on_timeout=lambda: f"; left: {kube.release_objects(api, ns, release)}",
    )
    say("uninstalled: no object of the release left (Deployments, Jobs, the token's Secret, the heartbeat ...)")


@pytest.fixture
def api_ns_release(ns):
    api = kube.client_for(KUBECONFIG)
    yield api, ns, "nb"
