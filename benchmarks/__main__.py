"""`make bench`: every benchmark, one after the other, each printing its table with targets."""

from benchmarks import consumer_throughput, relay_throughput


def main() -> int:
    consumer_throughput.main([])
    print()
    relay_throughput.main([])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
