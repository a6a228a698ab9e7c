"""``bidder.adapters.aws.aws_client``: clients of one process share a session, built
under a lock, and each keeps its own region and endpoint."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from bidder.adapters.aws import aws_client


def test_clients_built_from_many_threads_at_once_all_answer(aws_endpoint: str) -> None:
    def list_tables(_: int) -> object:
        return aws_client("dynamodb", aws_endpoint).list_tables()["TableNames"]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(list_tables, range(16)))
    assert len(answers) == 16 and all(isinstance(names, list) for names in answers)


def test_each_client_keeps_its_own_region_and_endpoint(aws_endpoint: str) -> None:
    west = aws_client("kinesis", aws_endpoint, "eu-west-1")
    east = aws_client("kinesis", "http://127.0.0.1:1", "us-east-1", quick=True)
    assert (west.meta.region_name, west.meta.endpoint_url) == ("eu-west-1", aws_endpoint)
    assert (east.meta.region_name, east.meta.endpoint_url) == ("us-east-1", "http://127.0.0.1:1")
    assert (west.meta.config.connect_timeout, east.meta.config.connect_timeout) == (2, 0.5)
