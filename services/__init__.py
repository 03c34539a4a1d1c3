"""The platform's services, each a package that imports no other: the saga's (orders,
inventory, payment, notification; inventory also in Java and TypeScript beside them), the two
sandboxes that stand in for the outside world (payment_provider, mail), and the modules they
share directly under this folder (the topology, the saga's contract and events, settings, the
HTTP start-up). They run on the library, `effectively_once`."""
