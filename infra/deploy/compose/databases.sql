-- Run once by the postgres image on an empty data directory: the three databases, and
-- the schema registry's (Apicurio's SQL storage).
CREATE DATABASE resolver;
CREATE DATABASE product;
CREATE DATABASE control;
CREATE DATABASE registry;
