"""GET /healthz: a plain-text "ok" for load balancers. No django_db mark: a query would fail the test."""


def test_healthz_says_ok_without_the_database(client):
    response = client.get("/healthz")
    assert (response.status_code, response["Content-Type"], response.content) == (200, "text/plain", b"ok")
