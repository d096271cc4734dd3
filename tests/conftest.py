pytest_plugins = [
    "tests.fixtures.services",
    "tests.fixtures.resolver_api",
    "tests.fixtures.fault_proxy",
    "tests.fixtures.jaeger",
    "tests.fixtures.spans",
    "tests.fixtures.browser",
    "tests.fixtures.contention",
]
