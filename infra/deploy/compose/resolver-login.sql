-- After the migrations (which create the role gapless_resolver_app and its grants): the
-- login the resolver services connect with, holding only that role. Idempotent; the
-- password is psql's variable :pw.
SELECT format('CREATE ROLE gapless_resolver_service LOGIN PASSWORD %L IN ROLE gapless_resolver_app', :'pw')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'gapless_resolver_service') \gexec
SELECT format('ALTER ROLE gapless_resolver_service LOGIN PASSWORD %L', :'pw') \gexec
