-- Tables of TDengine's own stream syntax tests (test/cases/13-StreamProcessing), rebuilt from
-- the schemas those tests create: the conformance runner checks an invalid-statements file
-- that has no setup of its own against them, as TDengine checks those statements against its
-- catalog (a SESSION over a column that is not the primary key, a query table's columns).
create database create_stream_db;
use create_stream_db;
create table trigger_table (col1 timestamp, col2 int, col3 int, col4 int, col5 int, col6 int);
create table trigger_stable (col1 timestamp, col2 int, col3 int, col4 int, col5 int, col6 int) tags(tag1 varchar(30), tag2 varchar(30), tag3 varchar(30), tag4 varchar(30));
create table trigger_ctable using trigger_stable tags('1', '2', '3', '4');
create table exist_super_table (out_col1 timestamp, out_col2 bigint, out_col3 bigint) tags(out_tag1 varchar(30), out_tag2 varchar(30));
create table exist_sub_table using exist_super_table tags('1', '2');
create table exist_normal_table (out_col1 timestamp, out_col2 bigint, out_col3 bigint);
create table query_table (ts timestamp, q_col1 bigint, q_col2 bigint, q_col3 bigint, q_col4 bigint, q_col5 bigint, q_col6 bigint);
-- stream options test (sdb0): ct1 has no cdouble column
create table stb (cts timestamp, cint int) tags (tint int);
create table ct1 using stb tags(1);
create table ct2 using stb tags(2);
create table ntb (cts timestamp, cint int, cdouble double, cvarchar varchar(16));
