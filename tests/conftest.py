pytest_plugins = [
    "tests.fixtures.services",
    "tests.fixtures.resolver_api",
    "tests.fixtures.fault_proxy",
]
