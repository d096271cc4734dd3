-- Run once by the postgres image on an empty data directory: the three databases.
CREATE DATABASE resolver;
CREATE DATABASE product;
CREATE DATABASE control;
