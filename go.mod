module github.com/fencerun/fencerun

go 1.26.8
