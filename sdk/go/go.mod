module github.com/sluice-events/sluice/sdk/go

go 1.23
